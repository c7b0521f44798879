"""Row selection and order: by model size, `none` first; filters are shell patterns; a miss names what is there."""

from __future__ import annotations

import pytest

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord, record_key
from userturn.report.filters import RowFilter, row_order, select_groups
from userturn.report.summary import summarise


def rows() -> list:
    out = []
    for model in ("org/m-27B", "org/m-2B", "plain"):
        for perturbation in ("generic", "none", "wrong_answer"):
            for t in (1.0, 0.0):
                out.append(ProbeRecord(key=record_key(model, "d", "q", perturbation, t, 0), model=model,
                                       dataset="d", item_id="q", perturbation=perturbation, temperature=t, sample=0,
                                       seed=0, status="ok", user_turn="u", label="generic", label_source="judge",
                                       judge_status="ok"))
    return summarise(out)


def test_order_by_size_then_none_first_then_temperature() -> None:
    order = [(g.model, g.perturbation, g.temperature) for g in row_order(rows())]
    assert order[:6] == [("org/m-2B", "none", 0.0), ("org/m-2B", "none", 1.0), ("org/m-2B", "generic", 0.0),
                         ("org/m-2B", "generic", 1.0), ("org/m-2B", "wrong_answer", 0.0),
                         ("org/m-2B", "wrong_answer", 1.0)]
    assert [g.model for g in row_order(rows())][6::6] == ["org/m-27B", "plain"]
    assert [g.model for g in row_order(rows(), ["plain"])][::6] == ["plain", "org/m-2B", "org/m-27B"]


def test_filters_are_patterns_and_alternatives() -> None:
    kept = select_groups(rows(), RowFilter(models=["org/*"], perturbations=["none", "generic"], temperatures=[0.0]))
    assert [(g.model, g.perturbation) for g in kept] == [("org/m-2B", "none"), ("org/m-2B", "generic"),
                                                         ("org/m-27B", "none"), ("org/m-27B", "generic")]
    assert RowFilter(models=["a"], temperatures=[0.5]).describe() == "--model a --temperature 0.5"
    with pytest.raises(UserError, match=r"--dataset x\*: matches nothing in the results \(present: d\)"):
        select_groups(rows(), RowFilter(datasets=["x*"]))
