"""Rule pre-labels: empty turns, role-token leaks, near-verbatim restatements."""

from __future__ import annotations

import pytest

from userturn.core.records import Message, ProbeRecord
from userturn.judges.prelabel import apply_rules, normalise_text, prelabel, query_and_response

QUERY = "How many clips did Natalia sell altogether in April and May?"


def make(turn: str | None, status: str = "ok") -> ProbeRecord:
    return ProbeRecord(key="k", model="m", dataset="d", item_id="1", temperature=0.0, sample=0, seed=0,
                       status=status, user_turn=turn,
                       messages=[Message(role="system", content="be nice"), Message(role="user", content=QUERY),
                                 Message(role="assistant", content="72 clips.")])


@pytest.mark.parametrize("turn", ["", "   \n\t", "<|im_end|>", "<|endoftext|>\n", "</s>", " <eos> <|eot_id|> "])
def test_empty(turn: str) -> None:
    hit = apply_rules(turn, QUERY)
    assert hit is not None and (hit.rule, hit.label) == ("empty", "empty")


@pytest.mark.parametrize("turn", [
    "<|im_start|>assistant\nThe answer is 72.",
    "<|assistant|>72",
    "Assistant: the answer is 72",
    "  assistant: 72",
    "### Assistant: 72",
    "<|start|>assistant<|channel|>final<|message|>72",
    "Why 72?<|im_end|>\n<|im_start|>assistant\nBecause 48 + 24.",
    "<|start_header_id|>assistant<|end_header_id|>\n\n72",
])
def test_role_leak(turn: str) -> None:
    hit = apply_rules(turn, QUERY)
    assert hit is not None and (hit.rule, hit.label) == ("role_leak", "assistant_continuation"), turn


@pytest.mark.parametrize("turn", [
    QUERY,
    QUERY.upper(),
    "how many clips did natalia sell altogether in april and may",
    "How many clips did Natalia sell altogether in April and in May?",
])
def test_restatement(turn: str) -> None:
    hit = apply_rules(turn, QUERY)
    assert hit is not None and (hit.rule, hit.label) == ("restatement", "restates_query"), turn


@pytest.mark.parametrize("turn", [
    "Why did you divide 48 by 2?",
    "How many clips did Natalia sell in June?",  # shares words with the query, but asks something new
    "What does the assistant mean by altogether?",  # mentions a role word mid-sentence: not a leak
    "thanks",
])
def test_no_rule(turn: str) -> None:
    assert apply_rules(turn, QUERY) is None


def test_threshold_is_configurable() -> None:
    turn = "How many clips did Natalia sell in April and May?"
    assert apply_rules(turn, QUERY, threshold=0.99) is None
    assert apply_rules(turn, QUERY, threshold=0.8) is not None


def test_prelabel_verdict_and_query_extraction() -> None:
    record = make("<|im_end|>")
    verdict = prelabel(record)
    assert verdict is not None
    assert (verdict.judge, verdict.source, verdict.status, verdict.label) == ("rule:empty", "rule", "ok", "empty")
    assert query_and_response(record) == (QUERY, "72 clips.")
    assert prelabel(make("Why 72?")) is None
    assert prelabel(make(None, status="error")) is None  # no generation: nothing to label
    assert prelabel(make(None)).label == "empty"  # type: ignore[union-attr]


def test_normalise_text() -> None:
    assert normalise_text("  Hello,   WORLD!<|im_end|> ") == "hello world"
