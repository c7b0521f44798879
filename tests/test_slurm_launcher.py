"""`--launcher slurm` logic against stand-in sbatch/squeue/scancel commands (no cluster needed): waiting for the
endpoint, the startup deadline, failures in one line, and scancel on every way out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from userturn.serve.launcher import launch
from userturn.serve.manifest import parse_manifest
from userturn.serve.process import ServerStartError

from userturn.core.errors import UserError

SBATCH = """#!/bin/bash
echo "$@" > "$FAKE/sbatch.args"
[ -f "$FAKE/reject" ] && { echo "sbatch: error: Batch job submission failed: $(cat "$FAKE/reject")" >&2; exit 1; }
for a in "$@"; do
    case "$a" in --export=*) dir="${a#*USERTURN_ENDPOINT_DIR=}";; --chdir=*) run="${a#--chdir=}";; esac
done
for log in "$FAKE"/*.log; do [ -f "$log" ] && cp "$log" "$run/"; done
[ -f "$FAKE/endpoint" ] && cp "$FAKE/endpoint" "$dir/77_0.json"
[ -f "$FAKE/router" ] && cp "$FAKE/router" "$dir/77_router.json"
echo "77;cluster"
"""
SQUEUE = """#!/bin/bash
[ -f "$FAKE/squeue-error" ] && { cat "$FAKE/squeue-error" >&2; exit 1; }
if [ -f "$FAKE/cancelled" ]; then echo "77|CANCELLED|None"; else cat "$FAKE/state"; fi
"""
SCANCEL = """#!/bin/bash
echo "$@" >> "$FAKE/scancel.log"; touch "$FAKE/cancelled"
"""


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, fake = tmp_path / "bin", tmp_path / "fake"
    bin_dir.mkdir()
    fake.mkdir()
    for name, text in (("sbatch", SBATCH), ("squeue", SQUEUE), ("scancel", SCANCEL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (fake / "state").write_text("77|PENDING|Resources\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE", str(fake))
    monkeypatch.setattr("userturn.serve.slurm_launcher.CANCEL_WAIT_S", 2.0)
    return fake


def manifest(**fields):
    return parse_manifest({"engine": "transformers", "model": "/models/m", "served_model_name": "m", **fields})


def test_pending_past_the_deadline_fails_and_cancels(fake_slurm: Path, tmp_path: Path) -> None:
    seen: list[str] = []
    with pytest.raises(ServerStartError) as info, launch(manifest(startup_timeout=1), launcher="slurm",
                                                         log_dir=tmp_path / "runs", status=seen.append):
        pass
    msg = str(info.value)
    assert info.value.exit_code == 4 and "\n" not in msg
    assert msg.startswith("slurm job 77: not ready after") and "PENDING (Resources)" in msg
    assert (fake_slurm / "scancel.log").read_text().split() == ["77"]
    assert any("slurm job 77: PENDING (Resources); 0/1 ready" in s for s in seen)  # state shown while waiting
    args = (fake_slurm / "sbatch.args").read_text().split()
    assert args[0] == "--parsable" and args[-1].endswith("/job.sbatch") and Path(args[-1]).is_file()


def test_endpoint_is_served_then_cancelled(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "state").write_text("77|RUNNING|None\n")
    (fake_slurm / "endpoint").write_text(json.dumps({
        "base_url": "http://node7:4321/v1", "model": "smollm2-135m-instruct", "job_id": "77", "array_task_id": 0,
        "host": "node7", "port": 4321, "model_path": "/cache/smollm2.gguf"}))
    with launch(manifest(), launcher="slurm", log_dir=tmp_path / "runs", status=None) as server:
        assert server.base_urls == ["http://node7:4321/v1"] and server.model_name == "smollm2-135m-instruct"
        assert server.model_path == "/cache/smollm2.gguf" and server.slurm_job_id == "77"
        assert server.failure() is None
        (fake_slurm / "state").write_text("77|FAILED|NonZeroExitCode\n")
        assert "stopped serving: FAILED (NonZeroExitCode)" in (server.failure() or "")
        assert not (fake_slurm / "scancel.log").exists()
    assert (fake_slurm / "scancel.log").read_text().split() == ["77"]


def test_router_endpoint_is_the_base_url(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "state").write_text("77|RUNNING|None\n")
    for name, port in (("endpoint", 1), ("router", 2)):
        (fake_slurm / name).write_text(json.dumps({"base_url": f"http://n:{port}/v1", "model": "m", "job_id": "77",
                                                   "host": "n", "port": port}))
    m = parse_manifest({"engine": "sglang", "model": "m", "router": {}})
    with launch(m, launcher="slurm", log_dir=tmp_path, status=None) as server:
        assert server.base_urls == ["http://n:2/v1"] and server.replica_urls == ["http://n:1/v1"]


def test_a_busy_controller_is_not_a_dead_job(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "state").write_text("77|RUNNING|None\n")
    (fake_slurm / "endpoint").write_text(json.dumps({"base_url": "http://n:1/v1", "model": "m", "job_id": "77",
                                                     "host": "n", "port": 1}))
    with launch(manifest(), launcher="slurm", log_dir=tmp_path, status=None) as server:
        (fake_slurm / "squeue-error").write_text("squeue: error: slurm_load_jobs: Socket timed out")
        assert server.failure() is None
        (fake_slurm / "squeue-error").write_text("slurm_load_jobs error: Invalid job id specified")
        assert "stopped serving: no longer in the queue" in (server.failure() or "")
        (fake_slurm / "squeue-error").unlink()


def test_a_failed_replica_shows_its_own_log(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "state").write_text("77_0|RUNNING|None\n77_1|FAILED|NonZeroExitCode\n")
    (fake_slurm / "77_0.log").write_text("loading\n")
    (fake_slurm / "77_1.log").write_text("loading\nRuntimeError: CUDA out of memory\n")
    with pytest.raises(ServerStartError) as info, launch(manifest(replicas=2), launcher="slurm", log_dir=tmp_path,
                                                         status=None):
        pass
    msg = str(info.value)
    assert "ended before its server was ready: 77_0 RUNNING, 77_1 FAILED (NonZeroExitCode)" in msg
    assert "/77_1.log); last log lines: loading | RuntimeError: CUDA out of memory" in msg


def test_job_that_ends_early_shows_state_and_log_tail(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "state").write_text("77|FAILED|NonZeroExitCode\n")
    runs = tmp_path / "runs"
    with pytest.raises(ServerStartError) as info, launch(manifest(), launcher="slurm", log_dir=runs, status=None):
        pass
    assert "ended before its server was ready: FAILED (NonZeroExitCode)" in str(info.value)
    assert "the log is empty" in str(info.value)


def test_interrupt_cancels_the_job(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "state").write_text("77|RUNNING|None\n")
    (fake_slurm / "endpoint").write_text(json.dumps({"base_url": "http://n:1/v1", "model": "m", "job_id": "77",
                                                     "host": "n", "port": 1}))
    with pytest.raises(KeyboardInterrupt), launch(manifest(), launcher="slurm", log_dir=tmp_path, status=None):
        raise KeyboardInterrupt
    assert (fake_slurm / "scancel.log").read_text().split() == ["77"]


def test_rejected_submission_is_one_line(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "reject").write_text("Requested node configuration is not available")
    expected = (r"sbatch .*job.sbatch failed: sbatch: error: Batch job submission failed: Requested node "
                "configuration is not available")
    with pytest.raises(ServerStartError, match=expected), launch(manifest(), launcher="slurm", log_dir=tmp_path,
                                                                 status=None):
        pass
    assert not (fake_slurm / "scancel.log").exists()


def test_no_sbatch_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="sbatch not found on PATH") as info, launch(
            manifest(), launcher="slurm", log_dir=tmp_path, status=None):
        pass
    assert info.value.exit_code == 2
