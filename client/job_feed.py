"""Where the probe's workers take their next sample from: the job generator itself, or processes forked to run it.

At one sample per item, preparing a sample (parse the item, render its prompt, build its record template) costs
about as much client CPU as sending it. `ForkedFeed` runs the generator in processes forked from the probe, each
on every n-th item (`defaults.PREPARING_PROCESSES`), so preparation and requests use several cores: each child
sends finished jobs back over its own pipe in pickled batches (plain values and bytes: see `pipeline.Job`); the
parent only unpickles them, sends them and writes records. Jobs from different children interleave (records are
keyed; the file's order never mattered). `InlineFeed` runs the generator in the event loop's thread (one core).

A child is a copy of the probe at the moment of the fork (items, renderer, resume index, assistant turns), runs
nothing but the generator, never touches the event loop, and leaves with `os._exit` (no atexit handlers, no
flushing of the parent's buffers). It stops when its generator ends, when it raises (the parent raises the same
exception once the jobs made before it are taken: a dataset line that changed under the run stays a one-line
UserError), or when the parent goes away (a write to a pipe nobody reads fails). The parent stops reading at
`HIGH_WATER` jobs in hand, and the pipes' buffers then hold the children back.

`choose_feed` forks only where that is safe and useful: Linux (fork is the platform's own model there), a
single-threaded parent (a fork copies no other thread, and locks they hold would stay locked in the child), and
enough samples to pay for it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import gc
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
READ_LIMIT = 1 << 16  # bytes a pipe's reader buffers before it pauses (twice this)
HIGH_WATER = 16 * BATCH  # jobs the parent holds before it stops reading (the pipes then hold the children back)
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
    """The job generator, run in `processes` forked children, each on its share of the work (`make_jobs(shard,
    shards)`); jobs arrive in batches, in no particular order across children. Start with `await start()`.

    `pack` turns each job into picklable plain values in the child, `unpack` back in the parent. `snapshot()`
    (called in a child with each batch) returns a tuple of counters the generator moves; the parent mirrors their
    sum over the children with `restore` (each child counts from the values at the fork).
    """

    def __init__(self, make_jobs: Callable[[int, int], Iterator[Any]], *, pack: Callable[[Any], Any],
                 unpack: Callable[[Any], Any], snapshot: Callable[[], tuple[int, ...]],
                 restore: Callable[[tuple[int, ...]], None], processes: int = 1) -> None:
        self._make_jobs = make_jobs
        self._pack = pack
        self._unpack = unpack
        self._snapshot = snapshot
        self._restore = restore
        self._processes = max(1, processes)
        self._ready: collections.deque[Any] = collections.deque()
        self._available = asyncio.Event()  # jobs are ready, or the feed ended or failed
        self._room = asyncio.Event()  # the parent holds few enough jobs to read more
        self._room.set()
        self._transports: list[asyncio.BaseTransport] = []
        self._read_fds: list[int] = []
        self._readers: list[asyncio.StreamReader] = []
        self._pumps: list[asyncio.Task[None]] = []
        self._base: tuple[int, ...] = ()
        self._states: list[tuple[int, ...]] = []
        self._ended = 0
        self._error: BaseException | None = None
        self.pids: list[int] = []

    async def start(self) -> None:
        self._base = self._snapshot()
        self._states = [self._base] * self._processes
        loop = asyncio.get_running_loop()
        for shard in range(self._processes):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # a child: never returns
                os.close(read_fd)
                self._child(write_fd, shard)
            self.pids.append(pid)
            self._read_fds.append(read_fd)
            os.close(write_fd)
            # A small limit: past twice it the reader stops taking bytes from the pipe, so the child blocks on a full
            # pipe instead of the parent buffering what it has not asked for (readexactly still reads any size).
            reader = asyncio.StreamReader(limit=READ_LIMIT, loop=loop)
            transport, _ = await loop.connect_read_pipe(functools.partial(asyncio.StreamReaderProtocol, reader,
                                                                          loop=loop),
                                                        os.fdopen(read_fd, "rb", buffering=0))
            self._transports.append(transport)
            self._readers.append(reader)
            self._pumps.append(loop.create_task(self._pump(reader, shard)))

    def _child(self, write_fd: int, shard: int) -> None:
        status = 0
        try:
            gc.freeze()  # what the fork copied stays out of the collector's walks (which would copy its pages)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends the child
            for other in self._read_fds:  # the pipes of the children forked before this one: their ends only
                with contextlib.suppress(OSError):
                    os.close(other)
            out = write_fd
            pack, batch = self._pack, []
            error: Exception | None = None
            try:
                for job in self._make_jobs(shard, self._processes):
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
    def _send(fd: int, message: tuple[str, Any, Any]) -> None:
        """One length-prefixed frame, written whole: a write to a full pipe that a signal interrupts returns after
        part of it (PEP 475 retries only writes that wrote nothing), and a frame cut there would garble the rest."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_FRAME.pack(len(data)) + data)
        while view:
            view = view[os.write(fd, view):]

    async def _pump(self, reader: asyncio.StreamReader, shard: int) -> None:
        """Read one child's frames into the shared queue until its end, its error or its death."""
        try:
            while True:
                await self._room.wait()
                size = _FRAME.unpack(await reader.readexactly(_FRAME.size))[0]
                kind, payload, state = pickle.loads(await reader.readexactly(size))
                if state is not None:
                    self._states[shard] = state
                    base = self._base
                    self._restore(tuple(b + sum(s[i] - b for s in self._states) for i, b in enumerate(base)))
                if kind == "jobs":
                    unpack = self._unpack
                    self._ready.extend(unpack(job) for job in payload)
                    self._available.set()
                    if len(self._ready) >= HIGH_WATER:
                        self._room.clear()
                elif kind == "end":
                    self._ended += 1
                    break
                else:
                    self._error = self._error or payload
                    break
        except asyncio.IncompleteReadError:
            self._error = self._error or PreparerDied(
                "the process preparing the probe's requests ended before the last one (killed, or out of memory?)")
        except Exception as exc:  # a frame that does not unpickle: never a silent hang of the workers
            self._error = self._error or PreparerDied(
                f"unreadable jobs from the process preparing the probe's requests ({type(exc).__name__}: {exc})")
        finally:
            self._available.set()

    async def next(self) -> Any | None:
        ready = self._ready
        while not ready:
            if self._error is not None:
                raise self._error
            if self._ended == self._processes:
                return None
            self._available.clear()
            await self._available.wait()
        if not self._room.is_set() and len(ready) < HIGH_WATER // 2:
            self._room.set()
        job = ready.popleft()
        if ready:
            return job
        self._available.clear()  # the next caller waits for a pump (or sees the end)
        return job

    def held_bytes(self) -> int:
        """Bytes read from the pipes and not yet taken as jobs (bounded: see READ_LIMIT and HIGH_WATER)."""
        return sum(len(getattr(reader, "_buffer", b"")) for reader in self._readers)  # asyncio's own buffer

    def close(self) -> None:
        for pump in self._pumps:
            pump.cancel()
        for transport in self._transports:
            transport.close()
        self._transports.clear()
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # done already (then a zombie), or stopped early by the parent
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.pids.clear()
