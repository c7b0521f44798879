"""Worker pools that never outlive their caller."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable


async def run_all(workers: Iterable[Awaitable[object]]) -> None:
    """Run the workers as tasks. On the first failure (or if the caller is cancelled) cancel the others, wait
    until they have stopped, and re-raise: no request keeps running after a run was aborted."""
    tasks = [asyncio.ensure_future(w) for w in workers]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
