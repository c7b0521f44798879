"""The tiny random-weight model: builds offline, ChatML tokenizer and template, loadable by transformers."""

from __future__ import annotations

from pathlib import Path

import pytest

from userturn.serve.tiny_model import MARKER_FILE, SPECIAL_TOKENS, build_tiny_model, training_corpus

pytest.importorskip("transformers")


def test_build_is_small_and_idempotent(tmp_path: Path) -> None:
    out = build_tiny_model(tmp_path / "tiny")
    assert (out / MARKER_FILE).exists()
    size = sum(f.stat().st_size for f in out.iterdir())
    assert size < 2_000_000
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(out) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime, "second call reuses the files"


def test_tokenizer_has_chatml_tokens_and_template(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    for special in SPECIAL_TOKENS:
        ids = tok(special, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, f"{special} must be one token"
    assert tok.eos_token == "<|im_end|>"
    messages = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}]
    rendered = tok.apply_chat_template(messages, tokenize=False)
    assert rendered == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4.<|im_end|>\n"
    gen = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert gen.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    text = "naïve 数学 test\n  x"
    assert tok.decode(tok(text)["input_ids"]) == text, "byte-level BPE round-trips any text"


def test_model_loads_and_generates_non_special_tokens(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 2
    enc = tok("<|im_start|>user\n", return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    new = out[0, enc["input_ids"].shape[-1]:].tolist()
    assert len(new) == 12
    special_ids = {tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    assert not special_ids & set(new), "special tokens are muted so smoke outputs are never empty"


def test_training_corpus_is_deterministic() -> None:
    assert training_corpus(50, seed=1) == training_corpus(50, seed=1)
    assert training_corpus(50, seed=1) != training_corpus(50, seed=2)
