"""`userturn rerank`: follow-up rate of sampled responses vs task correctness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from userturn.cli import main
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord
from userturn.report.rerank import auroc, rerank


def rec(query: str, response: int, sample: int, correct: bool, label: str | None,
        perturbation: str = "none") -> ProbeRecord:
    item = f"{query}#a{response}"
    return ProbeRecord(
        key=f"m|d|{item}|raw|{perturbation}|t=1|s={sample}", model="m", dataset="d", item_id=item,
        perturbation=perturbation, temperature=1.0, sample=sample, seed=0, status="ok", user_turn="u",
        label=label, correct=correct, meta={"query_id": query, "assistant_sample": response},
    )


def responses(query: str, spec: list[tuple[bool, list[str]]]) -> list[ProbeRecord]:
    return [rec(query, r, s, correct, label) for r, (correct, labels) in enumerate(spec)
            for s, label in enumerate(labels)]


G, X = "genuine_followup", "restates_query"


def test_auroc():
    assert auroc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auroc([0.1], [0.9]) == 0.0
    assert auroc([0.5], [0.5]) == 0.5
    assert auroc([], [0.1]) is None


def test_rerank_agreement_metrics():
    records = [
        # q1: the correct response elicits more follow-ups -> agrees
        *responses("q1", [(True, [G, G, X]), (False, [X, X, G])]),
        # q2: the incorrect one wins -> disagrees
        *responses("q2", [(True, [X, X]), (False, [G, X]), (False, [X, X])]),
        # q3: all correct -> not mixed (counts in pooled AUROC only)
        *responses("q3", [(True, [G, G])]),
        rec("q1", 0, 9, True, None),  # unlabeled: ignored
    ]
    [row] = rerank(records)
    assert (row.queries, row.responses, row.correct_responses, row.mixed_queries) == (3, 6, 3, 2)
    # rates: correct {2/3, 0, 1}, incorrect {1/3, 1/2, 0}
    assert row.auroc == pytest.approx((3 + 0.5 + 3) / 9)
    assert row.within_auroc == pytest.approx((1 + 0 + 0.5) / 3)
    assert row.top1 == pytest.approx(0.5)  # q1 right, q2 wrong
    assert row.top1_random == pytest.approx((1 / 2 + 1 / 3) / 2)


def test_ties_for_top_split_evenly_and_groups_by_perturbation():
    records = [*responses("q", [(True, [X]), (False, [X])]),
               rec("q", 0, 0, True, G, perturbation="generic"), rec("q", 1, 0, False, X, perturbation="generic")]
    rows = {r.perturbation: r for r in rerank(records)}
    assert rows["none"].top1 == 0.5 and rows["none"].within_auroc == 0.5
    assert rows["generic"].top1 == 1.0


def test_cli_table_and_json(tmp_path: Path, capsys):
    path = tmp_path / "results.jsonl"
    with JsonlWriter(path) as writer:
        for record in responses("q1", [(True, [G]), (False, [X])]):
            writer.write(record)
    assert main(["rerank", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["auroc"] == 1.0 and rows[0]["top1"] == 1.0
    assert main(["rerank", str(path)]) == 0
    assert "AUROC" in capsys.readouterr().out
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["rerank", str(empty)]) == 1
