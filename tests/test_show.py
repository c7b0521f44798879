"""`userturn show`: generated user turns beside the human next turn, with who labelled them."""

from __future__ import annotations

from pathlib import Path

from userturn.cli import main
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord, record_key

CONVO = [{"role": "user", "content": "How many brothers does David have?"}, {"role": "assistant", "content": "One."}]


def rec(item: str, turn: str | None, *, meta: dict | None = None, label: str | None = None,
        status: str = "ok") -> ProbeRecord:
    return ProbeRecord(key=record_key("m", "mt-bench", item, "none", 0.0, 0), model="m", dataset="mt-bench",
                       item_id=item, temperature=0.0, sample=0, seed=0, messages=CONVO, status=status,
                       user_turn=turn, meta=meta, label=label, label_source="rule" if label else None,
                       error=None if status == "ok" else "boom")


def test_show_prints_generated_and_human_turns_and_labels(tmp_path: Path, capsys):
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:
        writer.write(rec("104", "How many brothers does David have?", meta={"second_turn": "What if each sister "
                         "has two brothers?"}, label="restates_query"))
        writer.write(rec("105", "Why one?"))
        writer.write(rec("106", None, status="error"))
    assert main(["show", str(results)]) == 0
    out = capsys.readouterr().out
    assert "human next turn" in out and "What if each sister has two brothers?" in out
    assert "restates_query (rule)" in out and "unjudged" in out and "106" not in out
    assert main(["show", str(results), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "(first 1 of 2)" in out and "Why one?" not in out


def test_show_without_human_turns_has_no_such_column_and_bad_limit(tmp_path: Path, capsys):
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:
        writer.write(rec("1", "Why one?"))
    assert main(["show", str(results)]) == 0
    assert "human next turn" not in capsys.readouterr().out
    assert main(["show", str(results), "--limit", "0"]) == 2
    assert "--limit must be at least 1" in capsys.readouterr().err
