"""On a real SLURM cluster (`../shared/tools/slurm-localhost.sh start`, as .ci/run does; `FAKE_GPUS=8 CPUS=32`
emulates a GPU node): every shipped manifest's script passes `sbatch --test-only`, and `probe --manifest
--launcher slurm` runs the CPU engine as a job end to end and leaves no job behind.

Skipped when no cluster answers, unless USERTURN_REQUIRE_SLURM=1 (set by .ci/run once it started one)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml
from userturn.serve.launcher import launch
from userturn.serve.manifest import load_manifest, parse_manifest
from userturn.serve.process import ServerStartError
from userturn.serve.slurm_launcher import ACTIVE_STATES
from userturn.serve.slurm_script import render_slurm

from userturn.core.jsonl import read_records

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
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
