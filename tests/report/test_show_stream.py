"""`userturn show` streams: its memory does not grow with the records' size, only by a few integers a line, and
the table is printed block by block as the records are read back."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import orjson
import pytest
from record_factory import make_record

from userturn.cli import main
from userturn.core.jsonl import JsonlWriter

LONG = "a long conversation turn " * 200  # ~5 kB a record: holding records would show at once


def write(path: Path, records: int) -> Path:
    with JsonlWriter(path) as writer:
        for i in range(records):
            writer.write(make_record(i, user_turn=f"turn {i} {LONG}"))
    return path


def peak_bytes(argv: list[str]) -> int:
    tracemalloc.start()
    try:
        assert main(argv) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("form", [["--json"], []])
def test_show_s_peak_memory_grows_by_far_less_than_the_records_it_passes(tmp_path: Path, capsys, form) -> None:
    small, large = write(tmp_path / "small.jsonl", 100), write(tmp_path / "large.jsonl", 700)
    peak_bytes(["show", str(small), "--limit", "3", *form])  # imports and caches warmed
    capsys.readouterr()
    grown = peak_bytes(["show", str(large), "--limit", "3", *form]) - peak_bytes(["show", str(small), "--limit", "3",
                                                                                   *form])
    capsys.readouterr()
    per_record = grown / 600
    assert per_record < 1000, f"show holds ~{per_record:.0f} bytes per record read (records are ~5 kB)"


def test_show_reads_back_only_the_records_it_prints_and_keeps_the_last_line_of_a_key(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "r.jsonl", 5)
    with JsonlWriter(path) as writer:  # key 2 again, labelled: it supersedes the earlier line
        writer.write(make_record(2, user_turn="again", label="restates_query", label_source="rule"))
    assert main(["show", str(path), "--json"]) == 0
    shown = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["item_id"] for r in shown] == ["0", "1", "3", "4", "2"]
    assert shown[-1]["user_turn"] == "again"
    assert main(["show", str(path), "--json", "--limit", "2", "--item", "[234]"]) == 0
    assert [orjson.loads(line)["item_id"] for line in capsys.readouterr().out.splitlines()] == ["3", "4"]


def test_show_prints_a_long_table_in_blocks_with_one_header_and_every_row(tmp_path: Path, capsys,
                                                                          monkeypatch) -> None:
    from userturn.report import show

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(show, "TABLE_ROWS", 4)
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as writer:
        for i in range(10):
            writer.write(make_record(f"item-{i}", user_turn=f"turn number {i}"))
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("generated user turn") == 1  # one header, three blocks
    assert all(f"turn number {i}" in out for i in range(10))
    assert out.index("turn number 3") < out.index("turn number 4") < out.index("turn number 9")
