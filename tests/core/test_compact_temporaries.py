"""`userturn compact` killed before its rename leaves a hidden temporary copy of the file; the next compact of the
file removes the copies whose process is gone (and only those)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from userturn.cli import main

GOLDEN = Path(__file__).parents[1] / "fixtures" / "judges" / "results_small.jsonl"
KILLED_BEFORE_RENAME = """
import os, signal, sys
from userturn.core import jsonl
jsonl.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed between the copy and the rename
jsonl.compact(sys.argv[1])
"""


def test_a_compact_removes_the_temporaries_of_an_interrupted_one(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results.jsonl"
    results.write_bytes(GOLDEN.read_bytes() * 2)  # superseded lines: compact has something to drop
    killed = subprocess.run([sys.executable, "-c", KILLED_BEFORE_RENAME, str(results)], timeout=120)
    assert killed.returncode == -9
    [left] = tmp_path.glob(".results.jsonl.compact-*")
    assert left.stat().st_size == len(GOLDEN.read_bytes())  # a copy of the file's size, left forever so far
    alive = tmp_path / f".results.jsonl.compact-{os.getppid()}"  # a running process's: not touched
    alive.write_bytes(b"x")
    other = tmp_path / ".other.jsonl.compact-999999999"  # another file's: not touched
    other.write_bytes(b"x")
    assert main(["compact", str(results)]) == 0
    assert "removed 1 temporary files an interrupted compact left" in capsys.readouterr().err
    assert not left.exists() and alive.exists() and other.exists()
    assert results.read_bytes() == GOLDEN.read_bytes()
