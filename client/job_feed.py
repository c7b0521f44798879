"""Where the probe's workers take their next sample from: the job generator itself, or a forked process running it.

At one sample per item, preparing a sample (parse the item, render its prompt, build its record template) costs
about as much client CPU as sending it. `ForkedFeed` runs the generator in a child process forked from the probe,
so preparation and requests use two cores: the child sends finished jobs back over a pipe in pickled batches
(plain values and bytes: see `pipeline.Job`), the parent only unpickles them, sends them and writes records.
`InlineFeed` runs the generator in the event loop's thread (one core; no fork).

The child is a copy of the probe at the moment of the fork (items, renderer, resume index, assistant turns), runs
nothing but the generator, never touches the event loop, and leaves with `os._exit` (no atexit handlers, no
flushing of the parent's buffers). It stops when the generator ends, when it raises (the parent re-raises the same
exception: a dataset line that changed under the run stays a one-line UserError), or when the parent goes away (a
write to a pipe nobody reads fails). The pipe's buffer bounds how far it runs ahead.

`choose_feed` forks only where that is safe and useful: Linux (fork is the platform's own model there), a
single-threaded parent (a fork copies no other thread, and locks they hold would stay locked in the child), and
enough samples to pay for it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol

from userturn import defaults
from userturn.errors import UserError

Prepare = Literal["auto", "inline", "process"]
BATCH = 64  # jobs per pickled frame
_FRAME = struct.Struct("!I")


class PreparerDied(UserError):
    """The preparing process ended before the last job (killed, out of memory): the run stops, records are kept."""

    exit_code = 3


class JobFeed(Protocol):
    async def next(self) -> Any | None:
        """The next job, or None when there are no more."""
        ...

    def close(self) -> None: ...


class InlineFeed:
    """The job generator, run in the calling thread."""

    def __init__(self, jobs: Iterator[Any]) -> None:
        self._jobs = jobs

    async def next(self) -> Any | None:
        return next(self._jobs, None)

    def close(self) -> None:
        pass


def can_fork() -> bool:
    return sys.platform == "linux" and hasattr(os, "fork") and threading.active_count() == 1


def choose_feed(prepare: Prepare, samples: int) -> Literal["inline", "process"]:
    """`process` when asked for and possible, or (auto) when also worth it: several cores and enough samples."""
    if prepare == "inline" or not can_fork():
        return "inline"
    if prepare == "process":
        return "process"
    return "process" if (os.cpu_count() or 1) >= 2 and samples >= defaults.MIN_FORKED_SAMPLES else "inline"


class ForkedFeed:
    """The job generator, run in a forked child; jobs arrive in batches. Start with `await start()`.

    `make_jobs` is called in the child; it yields jobs (`pack` turns each into picklable plain values) and
    `snapshot()` (called in the child with each batch) returns state the parent mirrors with `restore` (counters).
    """

    def __init__(self, make_jobs: Callable[[], Iterator[Any]], *, pack: Callable[[Any], Any],
                 unpack: Callable[[Any], Any], snapshot: Callable[[], Any], restore: Callable[[Any], None]) -> None:
        self._make_jobs = make_jobs
        self._pack = pack
        self._unpack = unpack
        self._snapshot = snapshot
        self._restore = restore
        self._ready: collections.deque[Any] = collections.deque()
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._refill: asyncio.Future[None] | None = None
        self._done = False
        self.pid = 0

    async def start(self) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            self._child(write_fd)
        self.pid = pid
        os.close(write_fd)
        loop = asyncio.get_running_loop()
        reader = self._reader = asyncio.StreamReader(limit=1 << 30, loop=loop)
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(read_fd, "rb", buffering=0))

    def _child(self, write_fd: int) -> None:
        status = 0
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends the child
            out = os.fdopen(write_fd, "wb", buffering=0)
            pack, batch = self._pack, []
            error: Exception | None = None
            try:
                for job in self._make_jobs():
                    batch.append(pack(job))
                    if len(batch) >= BATCH:
                        self._send(out, ("jobs", batch, self._snapshot()))
                        batch = []
            except BrokenPipeError:
                raise
            except Exception as exc:  # handed to the parent, which raises it after the jobs made before it
                error = exc
            self._send(out, ("jobs", batch, self._snapshot()))
            if error is None:
                self._send(out, ("end", None, None))
            else:
                try:
                    self._send(out, ("error", error, None))
                except (pickle.PicklingError, TypeError, AttributeError):
                    self._send(out, ("error", RuntimeError(f"{type(error).__name__}: {error}"), None))
        except BaseException:  # the parent went away (broken pipe) or the child was interrupted
            status = 1
        finally:
            os._exit(status)

    @staticmethod
    def _send(out: Any, message: tuple[str, Any, Any]) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_FRAME.pack(len(data)) + data)

    async def next(self) -> Any | None:
        ready = self._ready
        while not ready:
            if self._done:
                return None
            if self._refill is None:  # one worker reads the next frame; the others wait for it
                self._refill = asyncio.ensure_future(self._read_frame())
            refill = self._refill
            try:
                await asyncio.shield(refill)
            finally:
                if self._refill is refill and refill.done():
                    self._refill = None
        return ready.popleft()

    async def _read_frame(self) -> None:
        assert self._reader is not None
        try:
            size = _FRAME.unpack(await self._reader.readexactly(_FRAME.size))[0]
            kind, payload, state = pickle.loads(await self._reader.readexactly(size))
        except asyncio.IncompleteReadError:
            self._done = True
            raise PreparerDied("the process preparing the probe's requests ended before the last one (killed, or "
                               "out of memory?)") from None
        if state is not None:
            self._restore(state)
        if kind == "jobs":
            unpack = self._unpack
            self._ready.extend(unpack(job) for job in payload)
        elif kind == "end":
            self._done = True
        else:
            self._done = True
            raise payload

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # done already (then a zombie), or stopped early by the parent
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0
