"""`--launcher slurm`: sbatch a manifest's script, wait for the job's endpoint JSON, hand out its base URLs, scancel.

While waiting it shows the job state and the last log line; a job that ends, or is not ready by the startup
deadline, raises ServerStartError (exit 4) with the state and the log tail. The job is cancelled on exit, on
errors, on Ctrl-C and on SIGTERM, and the launcher waits until SLURM reports it gone.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError
from userturn.serve.manifest import Manifest
from userturn.serve.process import ServerStartError
from userturn.serve.slurm_script import render_slurm, slug

from userturn.core.errors import UserError

Status = Callable[[str], None]
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                           "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED"})
REPORT_EVERY_S = 15.0
CANCEL_WAIT_S = 30.0


class Endpoint(BaseModel):
    """What the job writes to `<endpoint_dir>/<job>_<task>.json` once its server answers."""

    base_url: str
    model: str
    job_id: str
    array_task_id: int = 0
    host: str
    port: int
    model_path: str | None = None


def _run(argv: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise UserError(f"--launcher slurm: {argv[0]} not found on PATH (run on a SLURM login node)") from None
    except subprocess.TimeoutExpired:
        raise ServerStartError(f"--launcher slurm: {' '.join(argv[:2])} did not answer in {timeout:.0f}s") from None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


@dataclass
class SlurmJob:
    """A submitted job (a job array for replicas): its id, logs, endpoints and state."""

    job_id: str
    tasks: int
    run_dir: Path
    router: bool = False

    @property
    def endpoint_dir(self) -> Path:
        return self.run_dir / "endpoints"

    def log_path(self, task: int = 0) -> Path:
        return self.run_dir / (f"{self.job_id}_{task}.log" if self.tasks > 1 else f"{self.job_id}.log")

    def _read(self, name: str) -> Endpoint | None:
        try:
            text = (self.endpoint_dir / f"{self.job_id}_{name}.json").read_text(encoding="utf-8")
            return Endpoint.model_validate(json.loads(text))
        except (OSError, ValueError, ValidationError):
            return None

    def endpoints(self) -> list[Endpoint]:
        """The replicas' endpoints written so far, by task."""
        return [e for e in (self._read(str(task)) for task in range(self.tasks)) if e is not None]

    def router_endpoint(self) -> Endpoint | None:
        """The router's endpoint (task 0 writes it once every replica is ready and the router answers)."""
        return self._read("router") if self.router else None

    def ready(self) -> bool:
        return len(self.endpoints()) == self.tasks and (not self.router or self.router_endpoint() is not None)

    def states(self) -> dict[str, str] | None:
        """`{job or job_task: "STATE (reason)"}` from squeue (all states, so failed jobs show too); {} when the
        controller no longer knows the job; None when squeue failed (e.g. the controller is busy): ask again."""
        try:
            proc = _run(["squeue", "-h", "-t", "all", "-j", self.job_id, "-o", "%i|%T|%r"])
        except ServerStartError:
            return None
        if proc.returncode != 0:
            return {} if "invalid job id" in proc.stderr.lower() else None
        out = {}
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                reason = "" if parts[2] in ("None", "") else f" ({parts[2]})"
                out[parts[0]] = parts[1] + reason
        return out

    def active(self) -> bool:
        states = self.states()
        return states is None or any(s.split()[0] in ACTIVE_STATES for s in states.values())

    def _read_tail(self, task: int, lines: int) -> list[str]:
        try:
            with open(self.log_path(task), encoding="utf-8", errors="replace") as fh:
                return list(deque((ln.rstrip() for ln in fh if ln.strip()), maxlen=lines))
        except OSError:
            return []

    def tail(self, lines: int = 8, task: int | None = None) -> list[str]:
        """Last non-blank lines of `task`'s log, else of the first log that has any."""
        for t in ([task] if task is not None else []) + list(range(self.tasks)):
            last = self._read_tail(t, lines)
            if last:
                return last
        return []

    def failed_task(self) -> int | None:
        """The first array task SLURM lists as no longer active (its log tells why)."""
        for key, state in sorted((self.states() or {}).items()):
            task = key.removeprefix(f"{self.job_id}_")
            if task.isdigit() and state.split()[0] not in ACTIVE_STATES:
                return int(task)
        return None

    def failure(self, what: str) -> ServerStartError:
        task = self.failed_task() if self.tasks > 1 else None
        tail = self.tail(task=task)
        lines = f"; last log lines: {' | '.join(tail)}" if tail else "; the log is empty"
        return ServerStartError(f"slurm job {self.job_id}: {what} (log: {self.log_path(task or 0)}){lines}")

    def describe(self, states: dict[str, str] | None = None) -> str:
        """`RUNNING`, `PENDING (Resources)`, or per array task `77_0 RUNNING, 77_[1-2] PENDING (Priority)`."""
        states = self.states() if states is None else states
        if states is None:
            return "state unknown (squeue failed)"
        if not states:
            return "no longer in the queue"
        return ", ".join(v if k == self.job_id else f"{k} {v}" for k, v in sorted(states.items()))

    def ended(self) -> str | None:
        """None while every task is active; else a description of the states."""
        states = self.states()
        if states is None or (states and all(s.split()[0] in ACTIVE_STATES for s in states.values())):
            return None
        return self.describe(states)

    def cancel(self, wait_s: float = CANCEL_WAIT_S) -> None:
        """scancel the job (every array task) and wait until SLURM no longer lists it as active."""
        with contextlib.suppress(UserError):
            _run(["scancel", self.job_id])
        deadline = time.monotonic() + wait_s
        with contextlib.suppress(UserError):
            while self.active() and time.monotonic() < deadline:
                time.sleep(0.5)


def submit(m: Manifest, run_dir: Path) -> SlurmJob:
    """Write the script into `run_dir` and sbatch it with its log and endpoint folder there."""
    if shutil.which("sbatch") is None:
        raise UserError("--launcher slurm: sbatch not found on PATH (run on a SLURM login node)")
    script = render_slurm(m)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "endpoints").mkdir(exist_ok=True)
    path = run_dir / "job.sbatch"
    path.write_text(script, encoding="utf-8")
    log = run_dir / ("%A_%a.log" if m.replicas > 1 else "%j.log")
    argv = ["sbatch", "--parsable", f"--output={log}", f"--chdir={run_dir}",
            f"--export=ALL,USERTURN_ENDPOINT_DIR={run_dir / 'endpoints'}", str(path)]
    proc = _run(argv)
    if proc.returncode != 0:
        raise ServerStartError(f"sbatch {path} failed: {_last_line(proc.stderr or proc.stdout)}")
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise ServerStartError(f"sbatch {path}: unexpected output {proc.stdout.strip()[:100]!r}")
    return SlurmJob(job_id=job_id, tasks=m.replicas, run_dir=run_dir, router=m.router is not None)


def wait_for_endpoints(job: SlurmJob, deadline: float, say: Status, *, poll_s: float = 2.0) -> list[Endpoint]:
    """Block until every task has written its endpoint; ServerStartError if the job ends or the deadline passes."""
    started = time.monotonic()
    last_report = started
    last_state = ""
    while True:
        if job.ready():
            return job.endpoints()
        ended = job.ended()
        if ended is not None:
            if job.ready():  # written just before it ended?
                return job.endpoints()
            raise job.failure(f"ended before its server was ready: {ended}")
        now = time.monotonic()
        if now > deadline:
            raise job.failure(f"not ready after {now - started:.0f}s (startup_timeout; {job.describe()})")
        state = job.describe()
        if state != last_state or now - last_report >= REPORT_EVERY_S:
            tail = job.tail(1)
            router = "" if not job.router else " (router waiting)" if job.router_endpoint() is None else " + router"
            say(f"slurm job {job.job_id}: {state}; {len(job.endpoints())}/{job.tasks} ready{router}"
                + (f"; log: {tail[0][:160]}" if tail else ""))
            last_state, last_report = state, now
        time.sleep(poll_s)


@contextlib.contextmanager
def slurm_job(m: Manifest, *, log_dir: Path, say: Status) -> Iterator[tuple[SlurmJob, list[Endpoint]]]:
    """Submit, wait until ready, yield (job, endpoints); scancel on the way out, whatever happened."""
    run_dir = log_dir / f"{slug(m.label)}-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 10**6}"
    started = time.monotonic()
    job = submit(m, run_dir)
    say(f"submitted slurm job {job.job_id} ({run_dir / 'job.sbatch'}; log: {job.log_path()})")
    try:
        endpoints = wait_for_endpoints(job, started + m.timeout_s, say)
        yield job, endpoints
    finally:
        say(f"cancelling slurm job {job.job_id}")
        job.cancel()
