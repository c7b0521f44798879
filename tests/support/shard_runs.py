"""Sharded runs as processes: a dataset, the records compared without timing, and the report compared."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from cli_process import USERTURN
from results_lines import record_lines

JUDGE_SERVER = Path(__file__).parents[1] / "fixtures" / "judges" / "judge_server.py"


TIMING = ("latency_s", "attempts")


def userturn(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*USERTURN, *args], capture_output=True, text=True, timeout=240, cwd=cwd,
                          env={**os.environ, "OPENAI_API_KEY": ""})


def write_dataset(path: Path, n: int = 14) -> Path:
    """Items with a number in the answer (wrong_answer applies) or without (it does not); answers that share a
    word with the loopback's follow-up (the judge: genuine) or not (unrelated); two categories (swap partners stay
    within one)."""
    with path.open("w") as fh:
        for i in range(n):
            answer = f"She sold {i + 2} clips in total. #### {i + 2}" if i % 3 else "Yes."
            fh.write(json.dumps({"id": f"q{i}", "answer": str(i + 2), "meta": {"category": "ab"[i % 2]},
                                 "messages": [{"role": "user", "content": f"Natalia sold {i} clips. How many now?"},
                                              {"role": "assistant", "content": answer}]}) + "\n")
    return path


def comparable(*paths: Path) -> dict[str, dict]:
    """{key: record} of the files together, without what timing decides (latency, attempts)."""
    out: dict[str, dict] = {}
    for path in paths:
        for record in record_lines(path):
            for field in TIMING:
                record.pop(field)
            for verdict in record.get("judges") or []:
                for field in TIMING:
                    verdict.pop(field)
            assert record["key"] not in out, f"{record['key']} written by two shards"
            out[record["key"]] = record
    return out


def report_json(*paths: Path) -> list[dict]:
    proc = userturn("report", *map(str, paths), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def report_table(path: Path) -> str:
    proc = userturn("report", path.name, cwd=path.parent)  # a short name: never cut by a line break
    assert proc.returncode == 0, proc.stderr
    return " ".join(proc.stdout.replace(path.name, "RESULTS").split())  # the name's length may move a line break


def same_report(merged: Path, whole: Path, *sources: Path) -> None:
    """The report of the concatenated shards, and of the shard files (or their folder) named as they are, is the
    unsharded run's, to the last bit (the report's float sums do not depend on the records' order)."""
    assert report_table(merged) == report_table(whole)
    want = report_json(whole)
    assert report_json(merged) == want
    assert report_json(*sources) == want
