"""`userturn export`: SFT and preference rows from judged records."""

from __future__ import annotations

import json
from pathlib import Path

from userturn.cli import main
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord, record_key
from userturn.report.export import export_rows

CONVO = [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": "7"}]


def rec(sample: int, label: str | None, turn: str | None = None, *, status: str = "ok", item: str = "i1",
        perturbation: str = "none", temperature: float = 1.0) -> ProbeRecord:
    return ProbeRecord(
        key=record_key("m", "d", item, perturbation, temperature, sample), model="m", dataset="d", item_id=item,
        perturbation=perturbation, temperature=temperature, sample=sample, seed=sample, messages=CONVO,
        status=status, user_turn=turn if turn is not None else (f"turn {sample}" if status == "ok" else None),
        label=label,
    )


RECORDS = [
    rec(0, "genuine_followup", "Why is it 7?"),
    rec(1, "restates_query", "What is 3 + 4?"),
    rec(2, "genuine_followup", "And 3 + 5?"),
    rec(3, "empty", ""),
    rec(4, "generic"),
    rec(5, None),
    rec(6, None, status="error"),
    rec(0, "genuine_followup", "ok thanks, and 4+4?", perturbation="wrong_answer"),  # no partner in its group
]


def test_sft_rows_append_the_genuine_follow_up():
    rows, stats = export_rows(RECORDS, "sft")
    assert rows[0] == {"id": "i1", "messages": [*CONVO, {"role": "user", "content": "Why is it 7?"}],
                       "key": "m|d|i1|raw|none|t=1.0|s=0", "model": "m", "dataset": "d", "perturbation": "none",
                       "temperature": 1.0}
    assert [r["messages"][-1]["content"] for r in rows] == ["Why is it 7?", "And 3 + 5?"]
    assert (stats.records, stats.written, stats.skipped_unlabeled, stats.skipped_error) == (8, 2, 1, 1)
    assert stats.skipped_not_genuine == 3 and stats.skipped_perturbed == 1  # the wrong_answer context: not asked


def test_sft_takes_unperturbed_contexts_unless_asked_and_writes_each_row_once():
    """The same greedy turn at two temperatures and samples is one row; a genuine follow-up to a falsified answer
    (wrong_answer) or to "I'm not able to help" (generic) is exported only when its perturbation is asked for."""
    same = "Why is it 7 and not 8?"
    records = [rec(0, "genuine_followup", same, temperature=0.0), rec(1, "genuine_followup", same, temperature=0.0),
               rec(0, "genuine_followup", same, temperature=1.0), rec(1, "genuine_followup", "And 3 + 5?"),
               rec(0, "genuine_followup", "But you said 8?", perturbation="wrong_answer"),
               rec(0, "genuine_followup", "Why can't you help?", perturbation="generic")]
    rows, stats = export_rows(records, "sft")
    assert [(r["messages"][-1]["content"], r["temperature"], r["key"]) for r in rows] == [
        (same, 0.0, "m|d|i1|raw|none|t=0.0|s=0"), ("And 3 + 5?", 1.0, "m|d|i1|raw|none|t=1.0|s=1")]
    assert (stats.duplicates, stats.skipped_perturbed, stats.written) == (2, 2, 2)
    rows, stats = export_rows(records, "sft", ("none", "wrong_answer"))
    assert [r["perturbation"] for r in rows] == ["none", "none", "wrong_answer"] and stats.skipped_perturbed == 1
    rows, _ = export_rows(records, "sft", ("all",))
    assert sorted({r["perturbation"] for r in rows}) == ["generic", "none", "wrong_answer"] and len(rows) == 4


def test_cli_export_perturb_flag(tmp_path: Path, capsys):
    results = tmp_path / "results.jsonl"
    with JsonlWriter(results) as writer:
        for record in RECORDS:
            writer.write(record)
    assert main(["export", str(results), "--format", "sft", "--perturb", "wrong_answer"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(x)["perturbation"] for x in captured.out.splitlines()] == ["wrong_answer"]
    assert "contexts: wrong_answer; skipped: 7 from other perturbations' contexts" in captured.err
    assert main(["export", str(results), "--format", "sft", "--perturb", "swap"]) == 2
    assert "--perturb swap: no record with that perturbation (present: none, wrong_answer)" in capsys.readouterr().err
    assert main(["export", str(results), "--format", "sft-human", "--perturb", "all"]) == 2
    assert "--perturb chooses the contexts of sft and preference rows" in capsys.readouterr().err
    only = tmp_path / "perturbed.jsonl"
    with JsonlWriter(only) as writer:
        writer.write(RECORDS[-1])
    assert main(["export", str(only), "--format", "sft"]) == 1
    assert "every record is from a perturbed context; take them with --perturb" in capsys.readouterr().err


def test_preference_pairs_within_the_same_context_use_each_record_once():
    rows, stats = export_rows(RECORDS, "preference")
    about = {"model": "m", "dataset": "d", "perturbation": "none", "temperature": 1.0}
    assert rows == [
        {"id": "i1", "prompt": CONVO, "chosen": [{"role": "user", "content": "Why is it 7?"}],
         "rejected": [{"role": "user", "content": "What is 3 + 4?"}], "chosen_key": "m|d|i1|raw|none|t=1.0|s=0",
         "rejected_key": "m|d|i1|raw|none|t=1.0|s=1", **about},
        {"id": "i1", "prompt": CONVO, "chosen": [{"role": "user", "content": "And 3 + 5?"}],
         "rejected": [{"role": "user", "content": ""}], "chosen_key": "m|d|i1|raw|none|t=1.0|s=2",
         "rejected_key": "m|d|i1|raw|none|t=1.0|s=3", **about},
    ]
    assert stats.unpaired == 1 and stats.skipped_perturbed == 1  # sample 4 (generic) of `none`; wrong_answer
    assert stats.by_label["genuine_followup"] == 2


def test_different_temperatures_are_different_contexts():
    rows, _ = export_rows([rec(0, "genuine_followup", temperature=0.0), rec(0, "generic", temperature=1.0)],
                          "preference")
    assert rows == []


def test_cli_writes_file_and_reports_counts(tmp_path: Path, capsys):
    results = tmp_path / "results.jsonl"
    with JsonlWriter(results) as writer:
        for record in RECORDS:
            writer.write(record)
    out = tmp_path / "sft.jsonl"
    assert main(["export", str(results), "--format", "sft", "--out", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["messages"][-1]["role"] == "user"
    err = capsys.readouterr().err
    assert "exported 2 sft rows from 8 records" in err and "1 unlabeled, 1 without a generation" in err
    assert main(["export", str(results), "--format", "preference"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_cli_nothing_to_export_and_missing_file(tmp_path: Path, capsys):
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:
        writer.write(rec(0, None))
    assert main(["export", str(results), "--format", "sft"]) == 1
    assert "judge the results first" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing.jsonl"), "--format", "sft"]) == 2
    assert "results file not found" in capsys.readouterr().err


def test_cli_an_export_without_pairs_says_so_not_that_labels_are_missing(tmp_path: Path, capsys):
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:  # labelled, but each context has one label only: nothing to pair
        writer.write(rec(0, "genuine_followup", "Why?"))
        writer.write(rec(0, "generic", item="i2"))
    assert main(["export", str(results), "--format", "preference"]) == 1
    err = capsys.readouterr().err
    assert "judge the results first" not in err
    assert "no context has both a genuine follow-up and another label among its 2 labelled records" in err
    with JsonlWriter(results) as writer:  # appended: i1's record is now generic too
        writer.write(rec(0, "generic"))
    assert main(["export", str(results), "--format", "sft"]) == 1
    assert "none of the 2 labelled records is a genuine follow-up" in capsys.readouterr().err


def human_rec(sample: int, *, model: str = "m", perturbation: str = "none", temperature: float = 0.0,
              second_turn: str | None = "Now do it for 3 + 5.", label: str | None = None) -> ProbeRecord:
    record = rec(sample, label, perturbation=perturbation, temperature=temperature)
    meta = {"category": "math"} | ({"second_turn": second_turn} if second_turn is not None else {})
    return record.model_copy(update={"model": model, "meta": meta})


def test_sft_human_rows_end_with_the_human_next_turn_once_per_conversation():
    records = [
        human_rec(0), human_rec(1), human_rec(0, temperature=1.0), human_rec(0, model="other"),  # one conversation
        human_rec(0, perturbation="wrong_answer"),  # the human answered the original, not the perturbed turn
        human_rec(0, second_turn=None), human_rec(0, second_turn="  "),  # nothing to export
    ]
    rows, stats = export_rows(records, "sft-human")
    assert rows == [{"id": "i1", "messages": [*CONVO, {"role": "user", "content": "Now do it for 3 + 5."}]}]
    assert (stats.records, stats.written, stats.duplicates, stats.skipped_perturbed,
            stats.skipped_no_human_turn) == (7, 1, 3, 1, 2)


def test_cli_sft_human_needs_no_labels_and_explains_an_empty_export(tmp_path: Path, capsys):
    results = tmp_path / "results.jsonl"
    with JsonlWriter(results) as writer:
        writer.write(human_rec(0))
        writer.write(human_rec(1, second_turn=None))
    assert main(["export", str(results), "--format", "sft-human"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["messages"][-1] == {"role": "user", "content": "Now do it for 3 + 5."}
    assert ("exported 1 sft-human rows from 2 records (skipped: 1 without a human next turn, 0 perturbed, "
            "0 repeating a conversation already exported)") in captured.err
    plain = tmp_path / "plain.jsonl"
    with JsonlWriter(plain) as writer:
        writer.write(rec(0, "genuine_followup"))
    assert main(["export", str(plain), "--format", "sft-human"]) == 1
    assert "no record carries a human next turn" in capsys.readouterr().err
