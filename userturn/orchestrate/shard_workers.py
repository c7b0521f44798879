"""`userturn run EXPERIMENT --workers N`: the N shards of a run as N local `run --shard I/N` processes (asyncio
subprocesses), their output lines passed on prefixed with their shard. A failing shard does not stop the others; on
Ctrl-C or SIGTERM every shard still running is terminated, then killed after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from userturn.core.shards import Shard

LINE_LIMIT = 16 * 2**20  # the longest output line passed on whole
GRACE_S = 10.0  # how long a terminated shard gets to stop before it is killed


@dataclass(frozen=True)
class Worker:
    shard: Shard
    argv: list[str]


@dataclass(frozen=True)
class WorkerExit:
    worker: Worker
    returncode: int  # a process ended by a signal: 128 + the signal's number, as a shell reports it


async def _relay(stream: asyncio.StreamReader | None, out: TextIO, prefix: str) -> None:
    """Pass on every line of `stream` to `out`, prefixed."""
    if stream is None:
        return
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # a line over LINE_LIMIT: readline has dropped it, say so in its place
            line = b"[an output line over 16 MiB was dropped]\n"
        if not line:
            return
        out.write(prefix + line.decode("utf-8", errors="replace").rstrip("\n") + "\n")
        out.flush()


async def _run_one(worker: Worker, stdout: TextIO, stderr: TextIO, started: list[asyncio.subprocess.Process]
                   ) -> WorkerExit:
    process = await asyncio.create_subprocess_exec(
        *worker.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, limit=LINE_LIMIT)
    started.append(process)
    prefix = f"[shard {worker.shard}] "
    await asyncio.gather(_relay(process.stdout, stdout, prefix), _relay(process.stderr, stderr, prefix))
    code = await process.wait()
    return WorkerExit(worker, 128 - code if code < 0 else code)


async def _stop(processes: Sequence[asyncio.subprocess.Process]) -> None:
    """Terminate every process still running; kill those that outlive the grace period."""
    running = [p for p in processes if p.returncode is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            await asyncio.wait_for(process.wait(), GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


async def run_workers(workers: Sequence[Worker], *, stdout: TextIO | None = None,
                      stderr: TextIO | None = None) -> list[WorkerExit]:
    """Run every worker at once and wait for all of them; their exits in the order given. Cancelled (Ctrl-C), it
    stops the processes still running before it returns."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    started: list[asyncio.subprocess.Process] = []
    try:
        return list(await asyncio.gather(*(_run_one(w, stdout, stderr, started) for w in workers)))
    except BaseException:
        await asyncio.shield(_stop(started))
        raise

