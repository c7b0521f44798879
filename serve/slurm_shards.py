"""`userturn run EXPERIMENT --workers N --launcher slurm`: the N shards of a run as one SLURM job array, task I
running `run EXPERIMENT --shard I/N` (same installation and file system as the submitting node).

Each task writes its exit status to `$USERTURN_SHARD_EXIT_DIR/<task>` (no `sacct` needed; none written counts as
exit 1). The submitting process waits for the array (squeue with backoff) and cancels it on Ctrl-C, SIGTERM or error.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from userturn.core.errors import UserError
from userturn.serve.slurm_launcher import Backoff, SlurmJob, active, sbatch
from userturn.serve.slurm_script import slug

SHARD = "__USERTURN_SHARD__"  # the word of the command the task fills in with "I/N"
NO_STATUS = 1  # the exit code of a task that ended without writing one
REPORT_EVERY_S = 60.0


class ShardArrayError(UserError):
    """The shard array could not be submitted (exit 4, as a server that fails to start)."""

    exit_code = 4


@dataclass(frozen=True)
class ArrayResources:
    """What each shard task asks SLURM for (the client: its model servers are jobs of their own)."""

    cpus: int = 2
    mem: str = "8G"
    time: str = "2-00:00:00"
    sbatch_args: tuple[str, ...] = ()


def render_shard_array(command: Sequence[str], count: int, *, name: str,
                       resources: ArrayResources = ArrayResources()) -> str:
    """The sbatch script of the array: task I (1..count) runs `command` with its `__USERTURN_SHARD__` word replaced
    by `I/count`, then records its exit status."""
    if SHARD not in command:
        raise ValueError(f"the shard command has no {SHARD} word to fill in")
    words = ['"$SHARD"' if word == SHARD else shlex.quote(word) for word in command]
    lines = ["#!/bin/bash", f"#SBATCH --job-name=userturn-{slug(name)}-shards", f"#SBATCH --array=1-{count}",
             "#SBATCH --ntasks=1", f"#SBATCH --cpus-per-task={resources.cpus}", f"#SBATCH --mem={resources.mem}",
             f"#SBATCH --time={resources.time}", "#SBATCH --open-mode=append",
             *(f"#SBATCH {arg}" for arg in resources.sbatch_args),
             f"# userturn run --workers {count} --launcher slurm: {name}, shard $SLURM_ARRAY_TASK_ID of {count}; the",
             "# exit status goes to $USERTURN_SHARD_EXIT_DIR/<task> (a requeued task starts without one).",
             "", "set -u",
             'CHILD="" STOP=""',
             "trap 'STOP=1; [ -z \"$CHILD\" ] || kill -TERM \"$CHILD\" 2>/dev/null' TERM INT  # scancel: the shard"
             " stops, keeping what it completed",
             f'SHARD="$SLURM_ARRAY_TASK_ID/{count}"',
             'STATUS="${USERTURN_SHARD_EXIT_DIR:?}/$SLURM_ARRAY_TASK_ID"',
             'rm -f "$STATUS"',
             'echo "userturn: shard $SHARD (job ${SLURM_ARRAY_JOB_ID:-?} task $SLURM_ARRAY_TASK_ID on $(hostname);'
             ' restart ${SLURM_RESTART_COUNT:-0})"',
             " ".join(words) + " &",
             "CHILD=$!",
             '[ -z "$STOP" ] || kill -TERM "$CHILD" 2>/dev/null',
             'wait "$CHILD"; CODE=$?',
             'if kill -0 "$CHILD" 2>/dev/null; then wait "$CHILD"; CODE=$?; fi  # signalled while waiting',
             'echo "$CODE" > "$STATUS.tmp" && mv "$STATUS.tmp" "$STATUS"',
             'exit "$CODE"']
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ShardArray:
    """A submitted array: its job, and where its tasks write their logs and exit statuses."""

    job: SlurmJob
    count: int
    status_dir: Path

    def log(self, task: int) -> Path:
        return self.job.run_dir / f"{self.job.job_id}_{task}.log"

    def exit_code(self, task: int) -> int | None:
        """Task `task`'s exit status, None when it wrote none."""
        try:
            text = (self.status_dir / str(task)).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return int(text) if text.lstrip("-").isdigit() else None


def submit_shards(command: Sequence[str], count: int, run_dir: Path, *, name: str, workdir: Path,
                  resources: ArrayResources = ArrayResources()) -> ShardArray:
    """Write the array's script into `run_dir` and sbatch it (logs `<job>_<task>.log` there, appended to on requeue;
    the tasks start in `workdir`)."""
    if shutil.which("sbatch") is None:
        raise UserError("--launcher slurm: sbatch not found on PATH (run on a SLURM login node)")  # as for servers
    run_dir = run_dir.resolve()  # the tasks start elsewhere, maybe on another node
    run_dir.mkdir(parents=True, exist_ok=True)
    status_dir = run_dir / "exit"
    status_dir.mkdir(exist_ok=True)
    for old in status_dir.iterdir():  # statuses of an earlier submission of the same run
        old.unlink()
    script = run_dir / "shards.sbatch"
    script.write_text(render_shard_array(command, count, name=name, resources=resources), encoding="utf-8")
    job_id = sbatch(script, output=run_dir / "%A_%a.log", chdir=workdir,
                    export=f"ALL,USERTURN_SHARD_EXIT_DIR={status_dir}", error=ShardArrayError)
    return ShardArray(SlurmJob(job_id=job_id, tasks=count, run_dir=run_dir), count, status_dir)


def wait_for_shards(array: ShardArray, say: Callable[[str], None], *,
                    sleep: Callable[[float], None] = time.sleep) -> list[int]:
    """Block until no task of the array is queued or running (squeue with backoff); each task's exit code, in task
    order (NO_STATUS for a task that wrote none). The array is cancelled if this is interrupted."""
    backoff = Backoff()
    last, last_said = "", 0.0
    try:
        while True:
            states = array.job.states()
            if not active(states):
                break
            shown = array.job.describe(states)
            if shown != last or time.monotonic() - last_said >= REPORT_EVERY_S:
                done = sum(array.exit_code(t) is not None for t in range(1, array.count + 1))
                say(f"slurm job array {array.job.job_id}: {done}/{array.count} shards done; {shown}")
                last, last_said = shown, time.monotonic()
                backoff.reset()
            sleep(backoff.next())
    except BaseException:
        say(f"cancelling slurm job array {array.job.job_id}")
        with contextlib.suppress(Exception):
            array.job.cancel()
        raise
    return [NO_STATUS if (code := array.exit_code(t)) is None else code for t in range(1, array.count + 1)]


__all__ = ["SHARD", "ArrayResources", "ShardArray", "ShardArrayError", "render_shard_array", "submit_shards",
           "wait_for_shards"]
