"""run_all: a failing worker stops its siblings before the error reaches the caller."""

from __future__ import annotations

import asyncio

import pytest

from userturn.core.workers import run_all


async def test_all_workers_finish():
    done = []

    async def work(i: int) -> None:
        await asyncio.sleep(0)
        done.append(i)

    await run_all(work(i) for i in range(5))
    assert sorted(done) == [0, 1, 2, 3, 4]


async def test_first_failure_cancels_and_awaits_the_others():
    stopped = []

    async def slow(i: int) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            stopped.append(i)

    async def fail() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("endpoint gone")

    with pytest.raises(RuntimeError, match="endpoint gone"):
        await run_all([slow(0), fail(), slow(1)])
    assert sorted(stopped) == [0, 1]  # both already stopped when the error arrives
