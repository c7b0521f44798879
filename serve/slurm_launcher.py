"""`--launcher slurm`: sbatch a manifest's script, wait for the job's endpoint JSON, hand out its base URLs, scancel.

`startup_timeout` counts from when squeue shows a task RUNNING (queue time is limited only by
`cluster.slurm.queue_timeout`). squeue is asked with backoff, the endpoint files every second. The job is cancelled
on exit, error, Ctrl-C or SIGTERM, and the launcher waits until SLURM reports it gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from userturn.core.errors import UserError
from userturn.serve.manifest import Manifest
from userturn.serve.process import ABORT, ServerStartError, log_tail, start_error
from userturn.serve.slurm_script import render_slurm, slug

Status = Callable[[str], None]
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                           "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED"})
REPORT_EVERY_S = 15.0
CANCEL_WAIT_S = 30.0
SQUEUE_MIN_S, SQUEUE_MAX_S = 1.0, 30.0  # squeue backoff: from 1 s, doubling while nothing changes, up to 30 s
# A job is taken to have ended only when squeue says so twice this far apart: a job requeued while running shows as
# FAILED (NonZeroExitCode) for a moment (its killed step) before SLURM lists it as REQUEUED and PENDING.
ENDED_SETTLE_S = 3.0
FILE_POLL_S = 1.0  # endpoint files are read this often
ROUTER_GRACE_S = 120.0  # after its first replica is ready, the router has this long to answer


class Endpoint(BaseModel):
    """What the job writes to `<endpoint_dir>/<job>_<task>.json` once its server answers."""

    base_url: str
    model: str
    job_id: str
    array_task_id: int = 0
    host: str
    port: int
    model_path: str | None = None
    restart_count: int = 0


class Backoff:
    """Delays that double from SQUEUE_MIN_S to SQUEUE_MAX_S while nothing changes; `reset()` when something did."""

    def __init__(self) -> None:
        self._next = SQUEUE_MIN_S

    def next(self) -> float:
        delay, self._next = self._next, min(self._next * 2, SQUEUE_MAX_S)
        return delay

    def reset(self) -> None:
        self._next = SQUEUE_MIN_S


class StateWatch:
    """`squeue` for one job, asked at most as often as the backoff allows; the last answer in between."""

    def __init__(self, job: SlurmJob, clock: Callable[[], float] = time.monotonic) -> None:
        self.job, self.clock, self.backoff = job, clock, Backoff()
        self.states: dict[str, str] | None = None
        self._due = 0.0
        self._asked = 0.0  # when squeue gave `states`
        self._ended_since: float | None = None  # when squeue first said the job ended, in the current stretch

    def poll(self) -> dict[str, str] | None:
        now = self.clock()
        if now >= self._due:
            new = self.job.states()
            if new != self.states:
                self.backoff.reset()
            self.states, self._asked = new, now
            self._due = now + self.backoff.next()
        return self.states

    def ended(self) -> str | None:
        """`SlurmJob.ended` of the latest answer once squeue has said so in two answers ENDED_SETTLE_S apart; None
        before then (it asks again after ENDED_SETTLE_S) and while the job is active."""
        ended = self.job.ended(self.poll())
        if ended is None:
            self._ended_since = None
            return None
        if self._ended_since is None:
            self._ended_since = self._asked
            self._due = min(self._due, self._asked + ENDED_SETTLE_S)
        return ended if self._asked - self._ended_since >= ENDED_SETTLE_S else None


def active(states: dict[str, str] | None) -> bool:
    """Some task is queued or running (or squeue failed: None)."""
    return states is None or any(s.split()[0] in ACTIVE_STATES for s in states.values())


def task_of(key: str, job_id: str) -> int | None:
    """`77` -> 0, `77_3` -> 3; a pending range (`77_[1-2]`) -> None."""
    if key == job_id:
        return 0
    prefix = f"{job_id}_"
    rest = key[len(prefix):] if key.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def sbatch(script: Path, *, output: str | Path, chdir: Path, export: str, error: type[Exception]) -> str:
    """Submit `script` (log appended to `output`, run in `chdir` with `export`): its job id, else a one-line `error`."""
    argv = ["sbatch", "--parsable", f"--output={output}", "--open-mode=append", f"--chdir={chdir}",
            f"--export={export}", str(script)]
    proc = run_slurm_command(argv)
    if proc.returncode != 0:
        raise error(f"sbatch {script} failed: {last_line(proc.stderr or proc.stdout)}")
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise error(f"sbatch {script}: unexpected output {proc.stdout.strip()[:100]!r}")
    return job_id


def run_slurm_command(argv: list[str], *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise UserError(f"--launcher slurm: {argv[0]} not found on PATH (run on a SLURM login node)") from None
    except subprocess.TimeoutExpired:
        raise ServerStartError(f"--launcher slurm: {' '.join(argv[:2])} did not answer in {timeout:.0f}s") from None


def last_line(text: str) -> str:
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
            return Endpoint.model_validate_json((self.endpoint_dir / f"{self.job_id}_{name}.json").read_bytes())
        except (OSError, ValueError):  # not written yet (or not an endpoint)
            return None

    def endpoints(self) -> list[Endpoint]:
        """The replicas' endpoints written so far, by task."""
        return [e for e in (self._read(str(task)) for task in range(self.tasks)) if e is not None]

    def router_endpoint(self) -> Endpoint | None:
        """The router's endpoint (task 0 writes it once every replica is ready and the router answers)."""
        return self._read("router") if self.router else None

    def base_urls(self) -> list[str] | None:
        """Where clients go now: the router's URL, else every replica's; None until the router (in front of at least
        one replica), else every replica, has written its endpoint (a requeued task rewrites its own)."""
        if self.router:
            router = self.router_endpoint()
            return [router.base_url] if router else None
        endpoints = self.endpoints()
        return [e.base_url for e in endpoints] if len(endpoints) == self.tasks else None

    def states(self) -> dict[str, str] | None:
        """`{job or job_task: "STATE (reason)"}` from squeue (all states, so failed jobs show too); {} when the
        controller no longer knows the job; None when squeue failed (e.g. the controller is busy): ask again."""
        try:
            proc = run_slurm_command(["squeue", "-h", "-t", "all", "-j", self.job_id, "-o", "%i|%T|%r"])
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

    def tail(self, lines: int = 8, task: int | None = None) -> list[str]:
        """Last non-blank lines of `task`'s log, else of the first log that has any."""
        for t in ([task] if task is not None else []) + list(range(self.tasks)):
            if last := log_tail(self.log_path(t), lines):
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
        return start_error(f"slurm job {self.job_id}: {what}", self.log_path(task or 0), self.tail(task=task))

    def describe(self, states: dict[str, str] | None) -> str:
        """`RUNNING`, `PENDING (Resources)`, or per array task `77_0 RUNNING, 77_[1-2] PENDING (Priority)`."""
        if states is None:
            return "state unknown (squeue failed)"
        if not states:
            return "no longer in the queue"
        return ", ".join(v if k == self.job_id else f"{k} {v}" for k, v in sorted(states.items()))

    def ended(self, states: dict[str, str] | None) -> str | None:
        """None while every task is active (or squeue failed: None); else a description of the states."""
        if states is None or (states and all(s.split()[0] in ACTIVE_STATES for s in states.values())):
            return None
        return self.describe(states)

    def cancel(self) -> None:
        """scancel the job (every array task) and wait until SLURM no longer lists it as active."""
        with contextlib.suppress(UserError):
            run_slurm_command(["scancel", self.job_id])
        deadline = time.monotonic() + CANCEL_WAIT_S
        with contextlib.suppress(UserError):
            while active(self.states()) and time.monotonic() < deadline:
                time.sleep(0.5)


def submit(m: Manifest, run_dir: Path, api_key: str | None = None) -> SlurmJob:
    """Write the script into `run_dir` and sbatch it with its log (appended to on requeue) and endpoint folder there;
    `api_key` goes into `run_dir/api_key` (mode 600), which the job reads."""
    if shutil.which("sbatch") is None:
        raise UserError("--launcher slurm: sbatch not found on PATH (run on a SLURM login node)")
    script = render_slurm(m, secrets="keep")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "endpoints").mkdir(exist_ok=True)
    path = run_dir / "job.sbatch"
    path.unlink(missing_ok=True)  # a new file, mode 600: it may hold the manifest's env: secrets
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as fh:
        fh.write(script)
    log = run_dir / ("%A_%a.log" if m.replicas > 1 else "%j.log")
    # the job runs this interpreter's environment unless the manifest or the shell names another
    python = "" if m.cluster.slurm.python or "USERTURN_PYTHON" in os.environ else f"USERTURN_PYTHON={sys.executable},"
    export = f"ALL,{python}USERTURN_ENDPOINT_DIR={run_dir / 'endpoints'}"
    if api_key is not None:
        key_file = run_dir / "api_key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(api_key)
        export += f",USERTURN_API_KEY_FILE={key_file}"
    job_id = sbatch(path, output=log, chdir=run_dir, export=export, error=ServerStartError)
    return SlurmJob(job_id=job_id, tasks=m.replicas, run_dir=run_dir, router=m.router is not None)


def _late(job: SlurmJob, running_since: dict[int, float], now: float, timeout_s: float) -> str | None:
    """Why the job missed its startup deadline, counted from when its tasks run, else None."""
    if job.router:  # the router runs in task 0, in front of the first replica that is ready
        since = running_since.get(0)
        if since is not None and now - since > timeout_s + ROUTER_GRACE_S and job.router_endpoint() is None:
            return (f"no router after {now - since:.0f}s running (startup_timeout {timeout_s:.0f}s for "
                    f"the first replica + {ROUTER_GRACE_S:.0f}s for the router)")
        return None
    ready = {e.array_task_id for e in job.endpoints()}
    for task, since in sorted(running_since.items()):
        if task not in ready and now - since > timeout_s:
            which = f"task {task} " if job.tasks > 1 else ""
            return f"{which}not ready after {now - since:.0f}s running (startup_timeout {timeout_s:.0f}s)"
    return None


def wait_for_endpoints(job: SlurmJob, timeout_s: float, say: Status, *, queue_timeout: float | None = None,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> list[Endpoint]:
    """Block until the job is ready (`SlurmJob.base_urls`); ServerStartError if it ends, if a running task is not
    ready `timeout_s` after it started running, or (with `queue_timeout`) if it is still queued after that long."""
    watch = StateWatch(job, clock)
    submitted = last_report = clock()
    running_since: dict[int, float] = {}
    last_state = ""
    while True:
        if job.base_urls() is not None:
            return job.endpoints()
        if ABORT.is_set():
            raise ServerStartError(f"slurm job {job.job_id}: launch cancelled")
        ended = watch.ended()
        states = watch.states
        now = clock()
        if ended is not None:
            if job.base_urls() is not None:  # written just before it ended?
                return job.endpoints()
            raise job.failure(f"ended before its server was ready: {ended}")
        for key, state in (states or {}).items():
            if (task := task_of(key, job.job_id)) is None:
                continue
            if state.split()[0] == "RUNNING":
                running_since.setdefault(task, now)
            else:  # pending again (requeued): its count starts over when it runs
                running_since.pop(task, None)
        late = _late(job, running_since, now, timeout_s)
        if late is not None:
            raise job.failure(f"{late}; {job.describe(states)}")
        if queue_timeout is not None and not running_since and now - submitted > queue_timeout:
            raise job.failure(f"still queued after {now - submitted:.0f}s (cluster.slurm.queue_timeout; "
                              f"{job.describe(states)})")
        state = job.describe(states)
        if state != last_state or now - last_report >= REPORT_EVERY_S:
            tail = job.tail(1)
            router = "" if not job.router else " (router waiting)" if job.router_endpoint() is None else " + router"
            clock_note = "" if running_since else "; queue time does not count against startup_timeout"
            say(f"slurm job {job.job_id}: {state}; {len(job.endpoints())}/{job.tasks} ready{router}{clock_note}"
                + (f"; log: {tail[0][:160]}" if tail else ""))
            last_state, last_report = state, now
        sleep(FILE_POLL_S)


@contextlib.contextmanager
def slurm_job(m: Manifest, *, log_dir: Path, say: Status,
              api_key: str | None = None) -> Iterator[tuple[SlurmJob, list[Endpoint]]]:
    """Submit, wait until ready, yield (job, endpoints); scancel on the way out, whatever happened."""
    run_dir = log_dir / f"{slug(m.label)}-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 10**6}"
    job = submit(m, run_dir, api_key)
    say(f"submitted slurm job {job.job_id} ({run_dir / 'job.sbatch'}; log: {job.log_path()})")
    try:
        endpoints = wait_for_endpoints(job, m.timeout_s, say, queue_timeout=m.cluster.slurm.queue_timeout)
        yield job, endpoints
    finally:
        say(f"cancelling slurm job {job.job_id}")
        job.cancel()
