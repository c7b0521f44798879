"""A tiny GGUF file with a real (byte-level BPE) tokenizer and a ChatML template, written with the gguf library."""

from __future__ import annotations

from pathlib import Path

CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{'<|im_start|>assistant\\n'}}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def write_tiny_gguf(path: Path) -> Path:
    """Vocabulary: 3 specials (ids 0-2), a-z, 'Ġ' 'Ċ' '?' '.', and the merges 'he', 'll'. No tensors."""
    import gguf
    from gguf.constants import TokenType

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
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
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
