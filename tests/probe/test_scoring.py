"""Task scoring: GSM8K final-number extraction and comparison, IFEval via if-verifiable, dispatch."""

from __future__ import annotations

from decimal import Decimal

import pytest

from userturn.client.data.dataset import DatasetItem
from userturn.client.probe import scoring
from userturn.client.probe.scoring import find_final_number, score, strip_reasoning
from userturn.core.errors import UserError


def gsm(answer: str | None = "72", meta: dict | None = None) -> DatasetItem:
    return DatasetItem(id="g1", messages=[{"role": "user", "content": "q"}], answer=answer, meta=meta)


@pytest.mark.parametrize(("text", "value"), [
    ("so she sold 72 clips.\n#### 72", "72"),
    ("#### 1,000", "1000"),
    ("Therefore \\boxed{-3.5} is it.", "-3.5"),
    ("The answer is $18.", "18"),
    ("The final answer: 42\nLet me know if you need 3 more examples.", "42"),
    ("First 5, then 7.", "7"),
    ("It costs $-6 in the end", "-6"),
    ("a drop of −4", "-4"),
    ("The answer is 0.50.", "0.5"),
    ("1,2,3", "3"),
])
def test_final_number_extraction(text: str, value: str):
    found = find_final_number(text)
    assert found is not None and found.value == Decimal(value)


@pytest.mark.parametrize(("text", "stated", "scored"), [
    ("The answer is approximately 3 apples. I used 2 methods.", None, "3"),  # no stated answer: lenient marker
    ("#### The total is 18\nso 2 more", None, "18"),
    ("The answer is \\boxed{x+1} for 2 cases", None, "1"),  # the non-numeric box: the first number in it
    ("There are 19 integers in |x + 5| < 10.", None, "10"),  # the last number (the question's, wrongly)
    ("So, 38 people got on the bus at the terminal.", "38", "38"),
    ("total is $8000 + $4000 = $12000.", "12000", "12000"),
    ("#### 5\n\\boxed{7}", "5", "5"),
])
def test_stated_answer_first_then_the_lenient_reading(text: str, stated: str | None, scored: str):
    found = scoring.stated_answer(text)
    assert (found.value if found else None) == (Decimal(stated) if stated else None)
    assert find_final_number(text).value == Decimal(scored)


def test_final_number_none_and_marker_priority():
    assert find_final_number("no digits here") is None
    # `####` wins over a later number; \boxed wins over "the answer is"
    assert find_final_number("#### 5\nstep 9").value == 5
    assert find_final_number("\\boxed{3} and the answer is 4").value == 3


def test_span_covers_the_digits_only():
    text = "The answer is $1,234.50."
    found = find_final_number(text)
    assert text[found.start:found.end] == "1,234.50"


def test_strip_reasoning():
    assert strip_reasoning("<think>maybe 9</think>\nThe answer is 7.") == "The answer is 7."
    assert strip_reasoning("half a thought</think> 7") == "7"
    assert strip_reasoning("<think>cut off mid-thought 9") == ""


def test_gsm8k_score_numeric_equality():
    assert score("gsm8k", gsm("72"), "The answer is 72.00") == (True, {"exact_match": 1.0})
    assert score("gsm8k", gsm("1000"), "That is $1,000.") == (True, {"exact_match": 1.0})
    assert score("gsm8k", gsm("72"), "The answer is 73.") == (False, {"exact_match": 0.0})
    assert score("gsm8k", gsm("72"), "I don't know") == (False, {"exact_match": 0.0})
    # reasoning is removed before scoring: the 72 inside <think> does not count
    assert score("gsm8k:train", gsm("72"), "<think>72</think>The answer is 70")[0] is False


def test_gsm8k_without_reference_and_bad_reference():
    assert score("gsm8k", gsm(None), "7") == (None, None)
    with pytest.raises(UserError, match="reference answer 'seven' is not a number"):
        score("gsm8k", gsm("seven"), "7")


def test_dispatch_by_meta_overrides_name_and_unknown_datasets_have_no_scorer():
    assert score("my-local-file", gsm("7", meta={"scorer": "gsm8k"}), "it is 7")[0] is True
    assert score("mt-bench", gsm(None), "anything") == (None, None)
    with pytest.raises(UserError, match="unknown scorer 'bleu'"):
        score("x", gsm("1", meta={"scorer": "bleu"}), "1")


def ifeval_item(instructions: list[str], kwargs: list[dict], prompt: str = "Answer in lowercase.") -> DatasetItem:
    return DatasetItem(id="i1", messages=[{"role": "user", "content": prompt}],
                       meta={"scorer": "ifeval", "instruction_id_list": instructions, "kwargs": kwargs})


def test_ifeval_strict_and_loose():
    item = ifeval_item(["change_case:english_lowercase", "punctuation:no_comma"], [{}, {}])
    correct, scores = score("ifeval", item, "paris is the capital of france.")
    assert correct is True
    assert scores == {"prompt_strict": 1.0, "prompt_loose": 1.0, "instruction_strict": 1.0,
                      "instruction_loose": 1.0}
    correct, scores = score("ifeval", item, "Paris, of course.")
    assert correct is False
    assert scores["instruction_strict"] == 0.0 and scores["prompt_loose"] == 0.0


def test_ifeval_loose_forgives_a_markdown_first_line():
    item = ifeval_item(["detectable_format:title"], [{}])
    # a title in double angular brackets passes strictly
    assert score("ifeval", item, "<<My Title>> text")[0] is True
    item = ifeval_item(["keywords:existence"], [{"keywords": ["banana"]}])
    correct, scores = score("ifeval", item, "I like bananas")
    assert correct is True and scores["prompt_strict"] == 1.0
    item = ifeval_item(["change_case:english_lowercase"], [{}])
    correct, scores = score("ifeval", item, "Sure! Here it is:\nall lowercase text")
    assert correct is False and scores["prompt_loose"] == 1.0  # dropping the first line passes loosely


def test_ifeval_missing_nltk_data_is_a_clear_error(monkeypatch: pytest.MonkeyPatch):
    import nltk

    def missing(*args, **kwargs):
        raise LookupError("Resource punkt_tab not found")

    monkeypatch.setattr(nltk.data, "find", missing)
    with pytest.raises(UserError, match=r"python -m nltk.downloader punkt_tab"):
        scoring.preflight("ifeval", [ifeval_item(["punctuation:no_comma"], [{}])])
    scoring.preflight("gsm8k", [gsm("1")])  # nothing to check for gsm8k


@pytest.mark.parametrize(("meta_line", "expected"), [
    ('{"id": "2", "messages": [{"role": "user", "content": "q"}], "meta": {"scorer": "ifeval"}}', True),
    ('{"id": "2", "messages": [{"role": "user", "content": "q"}], "meta": {"sc\\u006frer": "ifeval"}}', True),
    ('{"id": "2", "messages": [{"role": "user", "content": "about a scorer"}]}', False),
    ('{"id": "2", "messages": [{"role": "user", "content": "q"}]}', False),
])
def test_preflight_of_a_dataset_on_disk_reads_the_scorers_its_lines_name(tmp_path, monkeypatch, meta_line, expected):
    from userturn.client.data.lazy_dataset import load_jsonl_lazy

    checked: list[str] = []
    monkeypatch.setattr(scoring, "_ifeval_registry", lambda: checked.append("ifeval"))
    monkeypatch.setattr(scoring, "check_nltk_data", lambda: None)
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "1", "messages": [{"role": "user", "content": "q"}]}\n' + meta_line + "\n")
    items = load_jsonl_lazy(path)
    scoring.preflight("mine", items)
    assert checked == (["ifeval"] if expected else [])
    for view, has_it in ((items.shuffled(5), expected), (items[::-1], expected), (items[:1], False)):
        checked.clear()
        scoring.preflight("mine", view)  # views keep what validation saw of each item
        assert checked == (["ifeval"] if has_it else [])
    path.write_text(meta_line.replace('"ifeval"', '"nope"').replace("about a", "x") + "\n")
    if expected:
        with pytest.raises(UserError, match="item 2: unknown scorer 'nope'"):
            scoring.preflight("mine", load_jsonl_lazy(path))
