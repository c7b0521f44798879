"""`--launcher slurm` logic against stand-in sbatch/squeue/scancel commands (no cluster needed): waiting for the
endpoint, the startup deadline (counted from RUNNING), squeue backoff, requeues followed, a router ready before its
last replica, failures in one line, and scancel on every way out."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from userturn.core.errors import UserError
from userturn.serve.launcher import launch
from userturn.serve.manifest import parse_manifest
from userturn.serve.process import ServerStartError
from userturn.serve.slurm_launcher import ENDED_SETTLE_S, Backoff, SlurmJob, StateWatch, task_of, wait_for_endpoints

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
echo x >> "$FAKE/squeue.calls"
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


def endpoint(port: int, task: int = 0, host: str = "n") -> str:
    return json.dumps({"base_url": f"http://{host}:{port}/v1", "model": "m", "job_id": "77", "array_task_id": task,
                       "host": host, "port": port})


def eventually(check: Callable[[], object], within: float = 5.0) -> object:
    """The first truthy value of `check` (the launcher asks squeue with backoff, so a change shows up late)."""
    deadline = time.monotonic() + within
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def test_pending_is_free_only_queue_timeout_limits_it(fake_slurm: Path, tmp_path: Path) -> None:
    """startup_timeout 1 s, pending for 3 s: not cancelled for startup; queue_timeout (2.5 s) ends the wait."""
    seen: list[str] = []
    m = manifest(startup_timeout=1, cluster={"slurm": {"queue_timeout": 2.5}})
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info, launch(m, launcher="slurm", log_dir=tmp_path / "runs",
                                                         status=seen.append):
        pass
    msg = str(info.value)
    assert time.monotonic() - started >= 2.5
    assert info.value.exit_code == 4 and "\n" not in msg
    assert msg.startswith("slurm job 77: still queued after") and "cluster.slurm.queue_timeout" in msg
    assert "PENDING (Resources)" in msg
    assert (fake_slurm / "scancel.log").read_text().split() == ["77"]
    assert any("slurm job 77: PENDING (Resources); 0/1 ready; queue time does not count against startup_timeout"
               in s for s in seen)
    args = (fake_slurm / "sbatch.args").read_text().split()
    assert args[0] == "--parsable" and args[-1].endswith("/job.sbatch") and Path(args[-1]).is_file()
    assert "--open-mode=append" in args  # a requeued job's log is appended to


def test_running_past_the_deadline_fails_and_cancels(fake_slurm: Path, tmp_path: Path) -> None:
    (fake_slurm / "state").write_text("77|RUNNING|None\n")
    with pytest.raises(ServerStartError) as info, launch(manifest(startup_timeout=1), launcher="slurm",
                                                         log_dir=tmp_path / "runs", status=None):
        pass
    msg = str(info.value)
    assert msg.startswith("slurm job 77: not ready after") and "s running (startup_timeout 1s); RUNNING" in msg
    assert (fake_slurm / "scancel.log").read_text().split() == ["77"]


class FakeTime:
    """A clock that moves only when the waiter sleeps, and runs `events` (time -> action) as it passes them."""

    def __init__(self, events: dict[float, Callable[[], None]]) -> None:
        self.now, self.events = 0.0, dict(events)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for at in sorted(t for t in self.events if t <= self.now):
            self.events.pop(at)()


def test_queue_time_then_startup_deadline_counted_from_running(fake_slurm: Path, tmp_path: Path) -> None:
    """Pending for 100 s with startup_timeout 10 s: waits. RUNNING from t=100, which squeue (backed off to 30 s)
    shows at t=121 (asked at 0, 1, 3, 7, 15, 31, 61, 91, 121): late at t=132, 11 s after that (> 10 s)."""
    job = SlurmJob(job_id="77", tasks=1, run_dir=tmp_path)
    (tmp_path / "endpoints").mkdir()
    t = FakeTime({100.0: lambda: (fake_slurm / "state").write_text("77|RUNNING|None\n")})
    with pytest.raises(ServerStartError, match=r"not ready after 11s running \(startup_timeout 10s\)"):
        wait_for_endpoints(job, 10.0, lambda _m: None, clock=t.clock, sleep=t.sleep)
    assert t.now == 132


def test_squeue_is_polled_with_backoff(fake_slurm: Path, tmp_path: Path) -> None:
    """Unchanged PENDING for 100 s at one file check a second: squeue at t = 0, 1, 3, 7, 15, 31, 61, 91 (8 calls,
    not 100); a change resets the delay to 1 s."""
    assert [d for b in [Backoff()] for d in (b.next() for _ in range(8))] == [1, 2, 4, 8, 16, 30, 30, 30]
    job = SlurmJob(job_id="77", tasks=1, run_dir=tmp_path)
    (tmp_path / "endpoints").mkdir()
    t = FakeTime({99.5: lambda: (tmp_path / "endpoints" / "77_0.json").write_text(endpoint(5))})
    wait_for_endpoints(job, 10.0, lambda _m: None, clock=t.clock, sleep=t.sleep)
    assert len((fake_slurm / "squeue.calls").read_text().split()) == 8


def test_task_keys() -> None:
    assert [task_of(k, "77") for k in ("77", "77_3", "77_[1-2]", "770")] == [0, 3, None, None]


def test_router_is_ready_before_the_last_replica(fake_slurm: Path, tmp_path: Path) -> None:
    """Two of three replicas run, one is pending: the router (in front of the ready ones) is enough to start."""
    (fake_slurm / "state").write_text("77_0|RUNNING|None\n77_1|RUNNING|None\n77_[2]|PENDING|Resources\n")
    (fake_slurm / "endpoint").write_text(endpoint(1))
    (fake_slurm / "router").write_text(endpoint(9))
    m = parse_manifest({"engine": "sglang", "model": "m", "replicas": 3, "router": {}, "startup_timeout": 1})
    with launch(m, launcher="slurm", log_dir=tmp_path, status=None) as server:
        assert server.base_urls == ["http://n:9/v1"] and server.replica_urls == ["http://n:1/v1"]


def test_router_missing_after_its_deadline_fails(fake_slurm: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("userturn.serve.slurm_launcher.ROUTER_GRACE_S", 1.0)
    (fake_slurm / "state").write_text("77_0|RUNNING|None\n77_[1-2]|PENDING|Resources\n")
    m = parse_manifest({"engine": "sglang", "model": "m", "replicas": 3, "router": {}, "startup_timeout": 1})
    with pytest.raises(ServerStartError, match=r"no router after \d+s running \(startup_timeout 1s for the first "
                       r"replica \+ 1s for the router\)"), launch(m, launcher="slurm", log_dir=tmp_path, status=None):
        pass


def test_requeued_job_is_followed(fake_slurm: Path, tmp_path: Path) -> None:
    """The job is requeued: its endpoint goes away (no failure: the job is still active), then comes back on
    another node and port; `follow` hands out the new URL and `base_urls` changes in place."""
    (fake_slurm / "state").write_text("77|RUNNING|None\n")
    (fake_slurm / "endpoint").write_text(endpoint(1, host="node1"))
    with launch(manifest(), launcher="slurm", log_dir=tmp_path, status=None) as server:
        assert server.follow is not None and server.follow() == ["http://node1:1/v1"]
        ep = next(tmp_path.glob("*/endpoints/77_0.json"))
        ep.unlink()
        (fake_slurm / "state").write_text("77|PENDING|BeginTime\n")
        assert server.follow() is None and server.failure() is None
        ep.write_text(endpoint(2, host="node2"))
        (fake_slurm / "state").write_text("77|RUNNING|None\n")
        assert server.follow() == ["http://node2:2/v1"] == server.base_urls
        assert server.failure() is None


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
        assert "stopped serving: FAILED (NonZeroExitCode)" in str(eventually(server.failure))
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
        assert "stopped serving: no longer in the queue" in str(eventually(server.failure))
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


def test_serve_prints_the_new_url_after_a_requeue(capsys: pytest.CaptureFixture[str]) -> None:
    from userturn.cli.serve import _follow
    from userturn.serve.launcher import Server

    answers = iter([["http://a:1/v1"], None, None, ["http://b:2/v1"], ["http://b:2/v1"]])
    server = Server(manifest=manifest(), base_urls=["http://a:1/v1"], model_name="m", slurm_job_id="77",
                    follow=lambda: next(answers))
    serving = list(server.base_urls)
    for _ in range(5):
        _follow(server, serving)
    out, err = capsys.readouterr()
    assert out == "ready: http://b:2/v1  model=m  (slurm job 77 moved)\n"
    assert err == ("userturn: slurm job 77 stopped serving at http://a:1/v1 (requeued?); waiting for its new "
                   "endpoint\n")


@pytest.mark.parametrize(("slurm", "env", "exported"), [
    ({}, None, True),  # the job runs the launching interpreter's environment
    ({"python": "/opt/py/bin/python"}, None, False),  # the manifest names one: the script has it
    ({}, "/shared/venv/bin/python", False),  # so does the shell ($USERTURN_PYTHON, passed on by --export=ALL)
])
def test_launcher_passes_its_python_to_the_job_not_the_script(
        fake_slurm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: dict[str, str], env: str | None,
        exported: bool) -> None:
    if env is None:
        monkeypatch.delenv("USERTURN_PYTHON", raising=False)
    else:
        monkeypatch.setenv("USERTURN_PYTHON", env)
    (fake_slurm / "state").write_text("77|RUNNING|None\n")
    (fake_slurm / "endpoint").write_text(endpoint(4321))
    with launch(manifest(cluster={"slurm": slurm}), launcher="slurm", log_dir=tmp_path / "runs", status=None):
        pass
    export = next(a for a in (fake_slurm / "sbatch.args").read_text().split() if a.startswith("--export="))
    assert (f",USERTURN_PYTHON={sys.executable}," in export) is exported
    script = next((tmp_path / "runs").rglob("job.sbatch")).read_text()
    assert sys.executable not in script and sys.prefix not in script


class ScriptedJob(SlurmJob):
    """A job whose squeue answers follow a script, one per question (the last one repeats)."""

    def __init__(self, answers: list[dict[str, str]]) -> None:
        self.job_id, self.answers, self.asked = "7", answers, 0

    def states(self) -> dict[str, str] | None:
        self.asked += 1
        return self.answers[min(self.asked, len(self.answers)) - 1]


def watch_until(job: SlurmJob, seconds: float, step: float = 0.5) -> list[tuple[float, str | None]]:
    """(time, StateWatch.ended()) every `step` seconds of a fake clock, for `seconds`."""
    now = [0.0]
    watch = StateWatch(job, lambda: now[0])
    seen = []
    while now[0] <= seconds:
        seen.append((now[0], watch.ended()))
        now[0] += step
    return seen


def test_a_job_shown_failed_for_a_moment_while_it_is_requeued_has_not_ended() -> None:
    """`scontrol requeue` of a running job: squeue says FAILED (NonZeroExitCode) once, for its killed step, then
    PENDING; the job never counts as ended. A job that stays FAILED ends after ENDED_SETTLE_S."""
    running, failed, pending = {"7": "RUNNING"}, {"7": "FAILED (NonZeroExitCode)"}, {"7": "PENDING (BeginTime)"}
    assert all(ended is None for _, ended in watch_until(ScriptedJob([running, failed, pending]), 60))
    seen = watch_until(ScriptedJob([running, failed]), 60)
    first = next(t for t, ended in seen if ended is not None)
    assert ENDED_SETTLE_S <= first - 1.0 <= ENDED_SETTLE_S + 1.0  # squeue first said FAILED at t=1 s
    assert dict(seen)[first] == "FAILED (NonZeroExitCode)"
