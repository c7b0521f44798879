"""One event-loop policy for every command: uvloop where it is installed, asyncio's loop otherwise."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh loop (what `asyncio.run` does otherwise)."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    with contextlib.suppress(ImportError):  # uvloop is missing on Windows
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def complete(coro: Coroutine[Any, Any, T]) -> T:
    """`run` from library code: on this thread, or on a thread of its own when this one already runs an event loop
    (a notebook's)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="userturn-run") as pool:
        return pool.submit(run, coro).result()
