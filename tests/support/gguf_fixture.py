"""A tiny GGUF file with a real (byte-level BPE) tokenizer and a ChatML template, written with the gguf library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{'<|im_start|>assistant\\n'}}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def write_tiny_gguf(path: Path, *, weights: bool = False, pre: str | None = "smollm", arch: str = "llama") -> Path:
    """Vocabulary: 3 specials (ids 0-2), a-z, 'Ġ' 'Ċ' '?' '.', and the merges 'he', 'll'. No tensors, unless
    `weights`: then a 1-layer model of `arch` with seeded random float32 weights (hidden 8) that transformers can
    load: `llama`, or `gemma3` (a scaled embedding, q/k norms, sliding-window layers, tied output)."""
    import gguf
    import numpy as np
    from gguf.constants import TokenType

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_tokenizer_model("gpt2")
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    tokens = [*SPECIALS, *(chr(c) for c in range(ord("a"), ord("z") + 1)), "Ġ", "Ċ", "?", ".", "he", "ll"]
    writer.add_token_list(tokens)
    writer.add_token_types([TokenType.CONTROL] * len(SPECIALS) + [TokenType.NORMAL] * (len(tokens) - len(SPECIALS)))
    writer.add_token_merges(["h e", "l l"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    if weights:
        (_add_gemma3_weights if arch == "gemma3" else _add_llama_weights)(writer, vocab=len(tokens), hidden=8,
                                                                            ffn=16, np=np)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_llama_weights(writer: Any, *, vocab: int, hidden: int, ffn: int, np: Any) -> None:
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    ones = np.ones(hidden, dtype=np.float32)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    tensors = {"token_embd.weight": rand(vocab, hidden), "output_norm.weight": ones,
               "output.weight": rand(vocab, hidden), "blk.0.attn_norm.weight": ones, "blk.0.ffn_norm.weight": ones,
               "blk.0.ffn_gate.weight": rand(ffn, hidden), "blk.0.ffn_up.weight": rand(ffn, hidden),
               "blk.0.ffn_down.weight": rand(hidden, ffn)}
    tensors |= {f"blk.0.attn_{name}.weight": rand(hidden, hidden) for name in ("q", "k", "v", "output")}
    for name, values in tensors.items():
        writer.add_tensor(name, values)


def _add_gemma3_weights(writer: Any, *, vocab: int, hidden: int, ffn: int, np: Any) -> None:
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    head_dim = 4
    writer.add_head_count_kv(1)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_sliding_window(16)
    tensors = {"token_embd.weight": rand(vocab, hidden), "output_norm.weight": rand(hidden),
               "blk.0.attn_q.weight": rand(2 * head_dim, hidden), "blk.0.attn_k.weight": rand(head_dim, hidden),
               "blk.0.attn_v.weight": rand(head_dim, hidden), "blk.0.attn_output.weight": rand(hidden, 2 * head_dim),
               "blk.0.attn_q_norm.weight": rand(head_dim), "blk.0.attn_k_norm.weight": rand(head_dim),
               "blk.0.ffn_gate.weight": rand(ffn, hidden), "blk.0.ffn_up.weight": rand(ffn, hidden),
               "blk.0.ffn_down.weight": rand(hidden, ffn)}
    tensors |= {f"blk.0.{name}.weight": rand(hidden) for name in ("attn_norm", "post_attention_norm", "ffn_norm",
                                                                  "post_ffw_norm")}
    for name, values in tensors.items():
        writer.add_tensor(name, values)


def write_relabelled_gguf(source: Path, path: Path, pre: str) -> Path:
    """A copy of `source`'s metadata (no tensors: vocabulary only) with `tokenizer.ggml.pre` set to `pre`."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(path), str(reader.fields["general.architecture"].contents()))
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "tokenizer.ggml.pre"):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub_type)
    writer.add_tokenizer_pre(pre)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
