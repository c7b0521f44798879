"""A tiny random-weight Qwen3 model with a locally trained ChatML tokenizer: smoke tests without a download.

Its outputs are noise. Usage: `python -m userturn.serve.tiny_model OUT_DIR` (or `build_tiny_model(out_dir)`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKER_FILE = "userturn_tiny_model.json"
TINY_MODEL_NAME = "userturn-tiny-random"

# ChatML like Qwen3: enable_thinking=false writes an empty think block into the generation prompt.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_WORD_TEXT = (
    "the a user assistant question answer model turn next follow up please explain why how what when where "
    "number sum total step first then finally result thanks can you could also more detail example list "
    "write code python function test error fix run data file read line value compute add subtract multiply "
    "divide apples oranges train hours miles cost price dollars each per week day year time speed distance "
    "think reason check correct wrong maybe sure great okay again other another different shorter longer"
)
_WORDS = _WORD_TEXT.split()


def training_corpus(lines: int = 400, seed: int = 0) -> list[str]:
    """Deterministic pseudo-sentences plus ChatML-formatted snippets, enough to train a small BPE."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        sentence = " ".join(words).capitalize() + rng.choice([".", "?", "!", ":"]) + f" {i * 7 % 100}"
        out.append(sentence)
    for role, text in itertools.islice(zip(itertools.cycle(["user", "assistant"]), out), 60):
        out.append(f"<|im_start|>{role}\n{text}<|im_end|>\n")
    return out


def build_tokenizer():
    """A byte-level BPE trained on `training_corpus()`, with the ChatML special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write a random-weight Qwen3 causal LM + tokenizer to `out_dir` (seconds, a few hundred KB). Idempotent."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    marker = out / MARKER_FILE
    if marker.exists() and (out / "config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        # Random logits would sometimes end a turn at once; muting the special tokens keeps smoke outputs non-empty.
        for token in SPECIAL_TOKENS:
            model.lm_head.weight[tokenizer.convert_tokens_to_ids(token)].zero_()
    model.generation_config = GenerationConfig(eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps({"name": TINY_MODEL_NAME, "seed": seed, "random_weights": True}) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False,
                                     description="Write a tiny random-weight ChatML model (smoke tests).")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build_tiny_model(args.out_dir, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
