"""What `userturn run` prints: turns beside the human's first, the offline facts (hand-counted), the table, the
rules-only notice with the command that adds a judge; 100 columns, no trailing spaces."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from userturn.core import aio
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import Message, ProbeRecord, record_key
from userturn.judges.rules_only import RulesOnly
from userturn.report.run_view import offline_facts, print_run_report, turns_beside_human


def record(item: str, perturbation: str, t: float, turn: str, finish: str, human: str | None = None) -> ProbeRecord:
    query = "What is 2+2? Answer briefly." if item == "q1" else "Name a prime number above ten."
    return ProbeRecord(key=record_key("smol-135M", "mt-bench", item, perturbation, t, 0), model="smol-135M",
                       dataset="mt-bench", item_id=item, perturbation=perturbation, temperature=t, sample=0, seed=0,
                       status="ok", user_turn=turn, finish_reason=finish,
                       messages=[Message(role="user", content=query), Message(role="assistant", content="4")],
                       meta={"second_turn": human} if human else None)


def records() -> list[ProbeRecord]:
    """Hand-counted: restatements 2 (r1, r2), empty 1 (r3), role leak 1 (r4); ended by the model 2 (r1, r2), cut
    at max_tokens 2 (r3, r4); perturbed pairs 1 (r2 with r1), the same turn in 1 of them."""
    plain = [
        record("q1", "none", 0.0, "What is 2+2? Answer briefly.", "stop", "And what is 3+3?"),
        record("q1", "wrong_answer", 0.0, "What is 2+2? Answer briefly.", "stop", "And what is 3+3?"),
        record("q1", "none", 1.0, "   ", "length", "And what is 3+3?"),
        record("q2", "none", 0.0, "<|im_start|>assistant\nThirteen is one.", "length"),
    ]
    rules = RulesOnly()
    return [aio.run(rules.judge(r)) for r in plain]


def test_offline_facts_are_counted_by_hand() -> None:
    assert offline_facts(records()) == [
        "What the rules measure without a judge (4 generated turns):",
        "  restates the query word for word (similarity >= 0.9): 2 of 4",
        "  empty: 1 of 4; starts with or writes an assistant header: 1 of 4",
        "  ended by the model: 2 of 4; cut at max_tokens: 2 of 4",
        "  the same turn word for word with the answer perturbed as without: 1 of 1 pairs",
    ]


def test_turns_come_beside_the_human_turn_with_label_and_ending() -> None:
    lines = turns_beside_human(records(), 100, "r.jsonl")
    text = "\n".join(lines)
    assert "── item q1 " in text and "human asked next  And what is 3+3?" in text
    assert "model T=0 none    What is 2+2? Answer briefly. [restates_query (rule); ended by the model]" in text
    assert "model T=1 none    (empty) [empty (rule); cut at max_tokens]" in text
    assert text.index("model T=0 none") < text.index("model T=0 wrong_answer")  # none first
    assert all(len(line) <= 100 for line in lines)
    long = record("q1", "none", 0.0, "word " * 200, "length")
    clipped = turns_beside_human([long], 100)
    assert clipped[-1].endswith("… [unjudged; cut at max_tokens]") and len(clipped) == 6  # 2 lines, tail whole


def test_the_printout_reads_top_to_bottom_at_100_columns(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    with JsonlWriter(results) as writer:
        for r in records():
            writer.write(r)
    out = io.StringIO()
    print_run_report(Console(file=out, width=100), results)
    text = out.getvalue()
    flat = " ".join(text.split())
    order = ["human asked next", "What the rules measure without a judge", "userturn report:",
             "labelled by rules only: 0 of 4 records are unjudged", f"add a judge: userturn judge {results}",
             "Next: every turn with its key: userturn show"]
    assert [flat.index(s) for s in order] == sorted(flat.index(s) for s in order)
    assert "(rules only: no rate below is a measurement)" in flat
    assert not [line for line in text.splitlines() if len(line) > 100 or line != line.rstrip()]


def test_report_on_a_rules_only_file_says_so(tmp_path: Path, capsys) -> None:
    from userturn.cli import main

    results = tmp_path / "results.jsonl"
    with JsonlWriter(results) as writer:
        for r in records():
            writer.write(r)
    assert main(["report", str(results)]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "(rules only: no rate below is a measurement)" in flat and "judged by: no judge model (+ rules: 4" in flat
    assert "labelled by rules only: 0 of 4 records are unjudged" in flat and "The rules never label" in flat
