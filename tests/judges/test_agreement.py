"""Majority label, Cohen's and Fleiss' kappa (textbook cases), Wilson intervals (known values)."""

from __future__ import annotations

import pytest

from userturn.core.records import JudgeVerdict, ProbeRecord
from userturn.judges.agreement import cohen_kappa, fleiss_kappa, majority_label
from userturn.report.stats import wilson_interval
from userturn.report.summary import panel_agreements


def test_majority_and_tie_break() -> None:
    assert majority_label(["generic", "genuine_followup", "genuine_followup"]) == "genuine_followup"
    # Ties go to the tied label voted first (the earliest judge in panel order).
    assert majority_label(["generic", "genuine_followup"]) == "generic"
    assert majority_label(["empty", "generic", "generic", "empty", "unrelated_query"]) == "empty"
    assert majority_label([]) is None


def test_cohen_kappa_textbook() -> None:
    # 50 items: both yes 20, A yes/B no 5, A no/B yes 10, both no 15. po = 0.7, pe = 0.5 -> kappa = 0.4.
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_cohen_kappa_hand_computed_three_labels() -> None:
    # po = 5/6; A: GF 4, AC 1, GE 1; B: GF 3, AC 1, GE 2 -> pe = (12 + 1 + 2) / 36; kappa = 15/21.
    a = ["gf", "gf", "gf", "gf", "ac", "ge"]
    b = ["gf", "gf", "gf", "ge", "ac", "ge"]
    assert cohen_kappa(a, b) == pytest.approx(15 / 21)
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    assert cohen_kappa(["x", "x"], ["x", "x"]) is None  # chance agreement 1: undefined
    assert cohen_kappa([], []) is None
    with pytest.raises(ValueError):
        cohen_kappa(["x"], [])


def test_fleiss_kappa_wikipedia_example() -> None:
    # Fleiss (1971) as worked on Wikipedia: 10 subjects, 14 raters, 5 categories; P̄ = 0.378, P̄e = 0.213.
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    items = [[c for c, count in zip("abcde", row, strict=True) for _ in range(count)] for row in table]
    assert fleiss_kappa(items) == pytest.approx(0.20993, abs=1e-5)


def test_fleiss_kappa_from_labels_hand_computed() -> None:
    # 4 items x 3 raters. Item agreement P_i: 1, 1/3, 1, 1/3 -> P̄ = 2/3.
    # Category shares: a = 6/12, b = 6/12 -> P̄e = 0.5 -> kappa = (2/3 - 1/2) / (1/2) = 1/3.
    items = [["a", "a", "a"], ["a", "a", "b"], ["b", "b", "b"], ["a", "b", "b"]]
    assert fleiss_kappa(items) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        fleiss_kappa([["a", "a"], ["a"]])
    with pytest.raises(ValueError):
        fleiss_kappa([["a"], ["b"]])


FULL = {"gf": "genuine_followup", "ge": "generic", "ac": "assistant_continuation", "a": "genuine_followup",
        "b": "generic"}


def _record(i: int, labels: dict[str, str | None]) -> ProbeRecord:
    verdicts = [JudgeVerdict(judge=j, status="ok" if lab else "error", label=FULL[lab] if lab else None)
                for j, lab in labels.items()]
    return ProbeRecord(key=str(i), model="m", dataset="d", item_id=str(i), temperature=0, sample=0, seed=0,
                       status="ok", user_turn="x", judges=verdicts)


def test_panel_agreements_two_and_three_judges() -> None:
    two = [_record(i, {"a": x, "b": y}) for i, (x, y) in enumerate(
        [("gf", "gf"), ("gf", "gf"), ("gf", "gf"), ("gf", "ge"), ("ac", "ac"), ("ge", "ge"), (None, "ge")])]
    [agreement] = panel_agreements(two)
    assert agreement.judges == ["a", "b"] and agreement.items == 6 and agreement.kappa_kind == "cohen"
    assert agreement.kappa == pytest.approx(15 / 21) and agreement.percent_agreement == pytest.approx(5 / 6)
    three = [_record(i, dict(zip("xyz", row, strict=True))) for i, row in enumerate(
        [("a", "a", "a"), ("a", "a", "b"), ("b", "b", "b"), ("a", "b", "b")])]
    [agreement] = panel_agreements(three)
    assert agreement.kappa_kind == "fleiss" and agreement.kappa == pytest.approx(1 / 3)
    assert len(agreement.pairs) == 3
    assert panel_agreements([_record(0, {"a": "gf"})]) == []


@pytest.mark.parametrize(("k", "n", "low", "high"), [
    (0, 10, 0.0, 0.2775),
    (5, 10, 0.2366, 0.7634),
    (10, 10, 0.7225, 1.0),
    (1, 20, 0.0089, 0.2361),
    (50, 100, 0.4038, 0.5962),
])
def test_wilson_known_values(k: int, n: int, low: float, high: float) -> None:
    interval = wilson_interval(k, n)
    assert interval is not None
    assert round(interval[0], 4) == low and round(interval[1], 4) == high


def test_wilson_edges() -> None:
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
