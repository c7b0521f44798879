"""benchmarks/gc_timing: the bench's client processes report the CPU time of their garbage collections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GC_TIMING = Path(__file__).resolve().parents[2] / "benchmarks" / "gc_timing"


def test_a_process_started_with_it_writes_its_collections(tmp_path: Path) -> None:
    out = tmp_path / "gc.json"
    env = {**os.environ, "PYTHONPATH": str(GC_TIMING), "BENCH_GC_OUT": str(out)}
    code = "import gc\nfor _ in range(3): gc.collect()\n"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    written = json.loads(out.read_text())
    assert written["collections"][2] >= 3  # gc.collect() is a full collection
    assert written["gc_s"] >= 0.0


def test_without_the_variable_it_writes_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(GC_TIMING)}
    env.pop("BENCH_GC_OUT", None)
    subprocess.run([sys.executable, "-c", "import gc; gc.collect()"], env=env, check=True, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []
