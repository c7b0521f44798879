"""userturn/report/scan.py and `userturn compact`: one configuration per number, superseded lines counted and dropped.

The file is made by hand: two runs of the same two keys with different max_tokens, concatenated (as `cat a.jsonl
b.jsonl`, each with its configuration line), and one record of the first run judged again (appended later).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.core.jsonl import compact, read_records
from userturn.report.summary import summarise_file

KEYS = ("m|d|q1|raw|none|t=0.0|s=0", "m|d|q2|raw|none|t=0.0|s=0")
A, B = "a" * 16, "b" * 16


def config(fingerprint: str, max_tokens: int) -> dict:
    return {"type": "config", "fingerprint": fingerprint, "config": {"model": "m", "dataset": "d", "mode": "raw",
                                                                     "perturbation": "none", "max_tokens": max_tokens}}


def record(key: str, fingerprint: str, label: str | None) -> dict:
    item = key.split("|")[2]
    verdict = [{"judge": "j", "source": "judge", "status": "ok", "label": label}] if label else []
    return {"schema_version": 3, "key": key, "status": "ok", "judge_status": "ok" if label else None,
            "config_fingerprint": fingerprint, "model": "m", "dataset": "d", "item_id": item, "mode": "raw",
            "perturbation": "none", "temperature": 0.0, "sample": 0, "seed": 1, "user_turn": f"turn {item}",
            "label": label, "label_source": "judge" if label else None, "judges": verdict}


def hand_made(tmp_path: Path) -> Path:
    lines = [config(A, 64), record(KEYS[0], A, None), record(KEYS[1], A, "generic"),
             record(KEYS[0], A, "genuine_followup"),  # q1 judged again: supersedes line 2
             config(B, 256), record(KEYS[0], B, "generic"), record(KEYS[1], B, "generic")]
    path = tmp_path / "both.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE) for line in lines))
    return path


def test_the_report_keeps_two_configurations_of_the_same_keys_apart(tmp_path: Path) -> None:
    report = summarise_file(hand_made(tmp_path))
    rows = {g.config_fingerprint: g for g in report.groups}
    assert set(rows) == {A, B}
    # A: q1 genuine_followup (its later line), q2 generic -> 1 of 2; B: both generic -> 0 of 2
    assert (rows[A].records, rows[A].n, rows[A].followups) == (2, 2, 1)
    assert (rows[B].records, rows[B].n, rows[B].followups) == (2, 2, 0)
    assert rows[A].config == config(A, 64)["config"] and rows[B].config["max_tokens"] == 256
    assert report.records == 4 and report.superseded == 1


def test_the_report_command_shows_both_rows_and_the_superseded_line(tmp_path: Path, capsys) -> None:
    path = hand_made(tmp_path)
    assert main(["report", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert sorted((r["config_fingerprint"], r["n"], r["followups"]) for r in rows) == [(A, 2, 1), (B, 2, 0)]
    assert "1 superseded lines" in captured.err


def test_read_records_refuses_the_mix_naming_both_configurations(tmp_path: Path) -> None:
    path = hand_made(tmp_path)
    with pytest.raises(UserError, match=rf"both\.jsonl:6: record '{KEYS[0].replace('|', '[|]')}' was made with "
                                        rf"configuration {B}, an earlier line of the same key with {A}"):
        read_records(path)


def test_compact_keeps_the_current_lines_byte_for_byte(tmp_path: Path, capsys) -> None:
    path = hand_made(tmp_path)
    before = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(before) + before[4] + b'{"schema_version": 3, "key": "m|d|q9')  # a repeat, a torn tail
    report = compact(path)
    assert (report.records, report.kept, report.superseded, report.configs, report.dropped_configs,
            report.torn_tail) == (5, 4, 1, 2, 1, True)
    assert path.read_bytes() == b"".join(before[i] for i in (0, 2, 3, 4, 5, 6))  # line 2 (superseded) dropped
    assert summarise_file(path).superseded == 0
    assert main(["compact", str(path)]) == 0  # compacting again changes nothing
    assert path.read_bytes() == b"".join(before[i] for i in (0, 2, 3, 4, 5, 6))
    assert "kept 4 of 4 record lines (0 superseded)" in capsys.readouterr().err
    assert not list(tmp_path.glob(".both.jsonl.compact-*"))  # no temporary left


def test_compact_refuses_a_malformed_line_and_leaves_the_file(tmp_path: Path) -> None:
    path = hand_made(tmp_path)
    path.write_bytes(path.read_bytes() + b'{"key": 3}\n')
    before = path.read_bytes()
    with pytest.raises(UserError, match=r"both\.jsonl:8: not a userturn record"):
        compact(path)
    assert path.read_bytes() == before


def test_compact_keeps_the_configuration_of_schema_2_records_as_a_line(tmp_path: Path) -> None:
    old = {**record(KEYS[0], A, None), "schema_version": 2, "config": config(A, 64)["config"]}
    rejudged = {**record(KEYS[0], A, "generic"), "schema_version": 2}  # judged again by a newer userturn
    path = tmp_path / "old.jsonl"
    path.write_bytes(orjson.dumps(old, option=orjson.OPT_APPEND_NEWLINE)
                     + orjson.dumps(rejudged, option=orjson.OPT_APPEND_NEWLINE))
    compact(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{**config(A, 64), "renderer": None, "run": None}, rejudged]
    assert summarise_file(path).groups[0].config == config(A, 64)["config"]
