"""Jobs prepared in a forked process arrive whole, in order, with their counters, errors and an end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from userturn.client import job_feed
from userturn.client.job_feed import ForkedFeed, InlineFeed, PreparerDied, can_fork, choose_feed

from userturn import defaults
from userturn.errors import UserError

pytestmark = pytest.mark.skipif(not can_fork(), reason="forks only on Linux, from a process without other threads")


class Counting:
    """A generator's side state, mirrored into the parent as `ProbeRun` mirrors its counters."""

    def __init__(self) -> None:
        self.made = 0
        self.odd = 100  # starts non-zero: the parent adds up what each child moved it by
        self.seen: tuple[int, ...] = ()

    def jobs(self, n: int, shard: int = 0, shards: int = 1, fail_at: int | None = None,
             hang_at: int | None = None, size: int | None = None) -> Iterator[tuple[int, bytes]]:
        for i in range(shard, n, shards):
            if i == fail_at:
                raise UserError(f"data.jsonl:{i + 1}: the file changed while the run was reading it")
            if i == hang_at:
                time.sleep(60)
            self.made += 1
            self.odd += i % 2
            yield i, b"x" * (i % 7 if size is None else size)

    def feed(self, n: int, processes: int = 1, **kwargs: int) -> ForkedFeed:
        def restore(state: tuple[int, ...]) -> None:
            self.seen = state
        return ForkedFeed(lambda shard, shards: self.jobs(n, shard, shards, **kwargs), pack=lambda job: job,
                          unpack=lambda job: job, snapshot=lambda: (self.made, self.odd), restore=restore,
                          processes=processes)


async def drain(feed: ForkedFeed | InlineFeed, workers: int = 8) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []

    async def worker() -> None:
        while (job := await feed.next()) is not None:
            got.append(job)
            await asyncio.sleep(0)

    await asyncio.gather(*(worker() for _ in range(workers)))
    return got


async def test_every_job_arrives_once_in_order_with_the_counters() -> None:
    state = Counting()
    feed = state.feed(1000)
    await feed.start()
    try:
        got = await drain(feed)
    finally:
        feed.close()
    assert got == [(i, b"x" * (i % 7)) for i in range(1000)]
    assert state.seen == (1000, 600) and state.made == 0  # counted in the child, mirrored here
    assert await feed.next() is None


async def test_several_processes_share_the_work_and_their_counts_add_up() -> None:
    state = Counting()
    feed = state.feed(1001, processes=3)
    await feed.start()
    assert len(feed.pids) == 3
    try:
        got = await drain(feed)
    finally:
        feed.close()
    assert sorted(got) == [(i, b"x" * (i % 7)) for i in range(1001)]  # each job once, whichever child made it
    assert state.seen == (1001, 600)


async def test_an_empty_generator_ends_at_once() -> None:
    feed = Counting().feed(0)
    await feed.start()
    try:
        assert await drain(feed) == []
    finally:
        feed.close()


async def test_the_childs_error_is_raised_here_after_the_jobs_before_it() -> None:
    state = Counting()
    feed = state.feed(500, fail_at=300)
    await feed.start()
    got: list[tuple[int, bytes]] = []
    try:
        with pytest.raises(UserError, match=r"^data.jsonl:301: the file changed while the run was reading it$"):
            while (job := await feed.next()) is not None:
                got.append(job)
    finally:
        feed.close()
    assert [i for i, _ in got] == list(range(300)) and state.seen == (300, 250)


async def test_a_killed_child_stops_the_run_with_one_line() -> None:
    feed = Counting().feed(500, hang_at=200)
    await feed.start()
    try:
        for _ in range(64):  # the first batch is there
            assert await feed.next() is not None
        os.kill(feed.pids[0], signal.SIGKILL)
        with pytest.raises(PreparerDied, match="ended before the last one"):
            await drain(feed)
        assert PreparerDied.exit_code == 3
    finally:
        feed.close()


async def test_close_stops_a_child_still_preparing_and_reaps_it() -> None:
    feed = Counting().feed(10**9, processes=2)  # each blocks on its full pipe
    await feed.start()
    pids = list(feed.pids)
    assert await feed.next() is not None
    feed.close()
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left behind


async def test_the_parent_holds_a_bounded_number_of_jobs_however_far_the_children_could_run() -> None:
    feed = Counting().feed(10**9, processes=2, size=4000)  # ~4 kB a job, as a GSM8K-sized sample's
    await feed.start()
    try:
        assert await feed.next() is not None
        await asyncio.sleep(0.5)  # the children have long filled their pipes
        assert len(feed._ready) <= job_feed.HIGH_WATER + 2 * job_feed.BATCH  # one more frame per pump at most
        assert feed.held_bytes() <= 2 * (2 * job_feed.READ_LIMIT + job_feed.BATCH * 4100)
    finally:
        feed.close()


async def test_frames_stay_whole_when_signals_interrupt_the_childrens_writes() -> None:
    feed = Counting().feed(200, processes=2, size=100_000)  # 6 MB frames: writes that block on a full pipe
    await feed.start()

    async def stop_and_continue() -> None:  # what a profiler's sampling does: each stop cuts a blocked write short
        while True:
            for pid in feed.pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(0.0005)

    stopper = asyncio.create_task(stop_and_continue())
    try:
        got = await asyncio.wait_for(drain(feed, workers=2), 60)
    finally:
        stopper.cancel()
        feed.close()
    assert sorted(i for i, _ in got) == list(range(200)) and all(len(b) == 100_000 for _, b in got)


class GarbledFeed(ForkedFeed):
    @staticmethod
    def _send(fd: int, message: tuple[str, Any, Any]) -> None:
        os.write(fd, b"\x00\x00\x00\x04junk")


async def test_a_frame_that_does_not_unpickle_stops_the_run_instead_of_hanging_it() -> None:
    state = Counting()
    feed = GarbledFeed(lambda shard, shards: state.jobs(10, shard, shards), pack=lambda job: job,
                       unpack=lambda job: job, snapshot=lambda: (0, 0), restore=lambda _state: None)
    await feed.start()
    try:
        with pytest.raises(PreparerDied, match=r"^unreadable jobs from the process preparing the probe's requests "):
            await asyncio.wait_for(drain(feed), 10)
    finally:
        feed.close()


async def test_inline_feed_is_the_generator() -> None:
    assert await drain(InlineFeed(Counting().jobs(5))) == [(i, b"x" * i) for i in range(5)]


def test_choose_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    enough = defaults.MIN_FORKED_SAMPLES
    with monkeypatch.context() as patched:
        patched.setattr(job_feed.threading, "active_count", lambda: 1)  # whatever earlier tests left running
        patched.setattr(job_feed.os, "cpu_count", lambda: 2)
        assert choose_feed("auto", enough) == "process" and choose_feed("auto", enough - 1) == "inline"
        assert choose_feed("process", 1) == "process" and choose_feed("inline", 10**6) == "inline"
        patched.setattr(job_feed.os, "cpu_count", lambda: 1)
        assert choose_feed("auto", 10**6) == "inline" and choose_feed("process", 1) == "process"
        patched.setattr(job_feed.sys, "platform", "darwin")
        assert choose_feed("process", 10**6) == "inline"
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:  # another thread: a fork would copy its locks, not it; nothing forks
        assert not can_fork() and choose_feed("process", 10**6) == "inline"
    finally:
        stop.set()
        thread.join()
