"""client/dataset_scan.py: validating a file in two halves at once gives what one pass gives, errors included."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from userturn.client import dataset, dataset_scan
from userturn.client.dataset_scan import Scan, scan_dataset, scan_lines

from userturn.errors import UserError


def line(item_id: Any, text: str = "q", meta: dict[str, Any] | None = None) -> str:
    return json.dumps({"id": item_id, "messages": [{"role": "user", "content": text},
                                                   {"role": "assistant", "content": "a"}], "meta": meta})


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    """Split every file, and count the forks."""
    calls: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        calls.append(1)
        return real_fork()

    monkeypatch.setattr(dataset_scan, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(dataset_scan, "_can_fork", lambda: True)
    monkeypatch.setattr(dataset_scan.os, "fork", fork)
    return calls


def one_pass(path: Path) -> Scan | str:
    scan = scan_lines(path)
    return scan.error if scan.error is not None else scan


def split(path: Path) -> Scan | str:
    try:
        return scan_dataset(path)
    except UserError as exc:
        return str(exc)


def same(a: Scan | str, b: Scan | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return (list(a.offsets), list(a.numbers), list(a.checksums), a.ids, bytes(a.ended), bytes(a.names_scorer)) == \
        (list(b.offsets), list(b.numbers), list(b.checksums), b.ids, bytes(b.ended), bytes(b.names_scorer))


def write(tmp_path: Path, lines: list[str], end: str = "\n") -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + end)
    return path


GOOD = [line(f"q{i}", "x" * (i * 13 % 90), {"scorer": "gsm8k"} if i in (2, 31) else None) for i in range(40)]


@pytest.mark.parametrize(("name", "lines", "end"), [
    ("valid", GOOD, "\n"),
    ("valid, blank lines, no final newline", [*GOOD[:20], "", "  ", *GOOD[20:]], ""),
    ("bad JSON in the first half", [*GOOD[:5], "{oops", *GOOD[5:]], "\n"),
    ("bad JSON in the second half", [*GOOD[:35], "[1]", *GOOD[35:]], "\n"),
    ("bad items in both halves", [*GOOD[:3], '{"id": "x"}', *GOOD[3:36], "{", *GOOD[36:]], "\n"),
    ("an id of the first half again in the second", [*GOOD, line("q3")], "\n"),
    ("a repeat within the second half", [*GOOD, line("z"), line("z")], "\n"),
    ("a cross repeat before a bad line", [*GOOD, line("q1"), "{"], "\n"),
    ("a bad line before a cross repeat", [*GOOD, "{", line("q1")], "\n"),
    ("a repeat within the second half of an id of the first", [*GOOD, line("q2"), line("q2")], "\n"),
    ("an int id", [*GOOD, line(7), line("7")], "\n"),
])
def test_two_halves_give_what_one_pass_gives(tmp_path: Path, forks: list[int], name: str, lines: list[str],
                                             end: str) -> None:
    path = write(tmp_path, lines, end)
    expected = one_pass(path)
    assert same(split(path), expected), name
    assert forks == [1]


def test_the_errors_read_as_one_pass_writes_them(tmp_path: Path, forks: list[int]) -> None:
    path = write(tmp_path, [*GOOD, line("q3"), "{"])
    assert split(path) == f"{path}:41: duplicate id 'q3' (first on line 4)"
    path = write(tmp_path, [*GOOD, "{", line("q3")])
    assert split(path).startswith(f"{path}:41: invalid JSON")  # type: ignore[union-attr]


def test_an_over_long_line_is_refused_wherever_the_middle_falls(tmp_path: Path, forks: list[int],
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(dataset, "MAX_LINE_BYTES", 300)
    for lines in ([*GOOD[:30], line("long", "y" * 400), *GOOD[30:]], [line("long", "y" * 5000), *GOOD]):
        path = write(tmp_path, lines)
        assert split(path) == one_pass(path)
        assert "line longer than" in str(split(path))


def test_a_child_that_dies_leaves_its_half_to_the_parent(tmp_path: Path, forks: list[int], monkeypatch) -> None:
    class Broken:
        HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
        loads = staticmethod(pickle.loads)

        @staticmethod
        def dumps(*_args: Any, **_kwargs: Any) -> bytes:
            raise MemoryError  # the child ends (status 1) without sending anything

    monkeypatch.setattr(dataset_scan, "pickle", Broken)
    for lines in (GOOD, [*GOOD, line("q5")]):
        path = write(tmp_path, lines)
        assert same(split(path), one_pass(path))


def test_small_files_and_limits_take_one_pass(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(dataset_scan, "_scan_halves", lambda *a: calls.append(1))
    path = write(tmp_path, GOOD)
    assert scan_dataset(path).ids == [f"q{i}" for i in range(40)]  # under SPLIT_MIN_BYTES
    monkeypatch.setattr(dataset_scan, "SPLIT_MIN_BYTES", 0)
    assert scan_dataset(path, limit=3).ids == ["q0", "q1", "q2"]
    assert calls == []
