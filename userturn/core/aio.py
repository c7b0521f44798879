"""One event-loop policy for every command: uvloop where it is installed, asyncio's loop otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None (asyncio's default) where uvloop is missing (Windows)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - windows
        return None
    return uvloop.new_event_loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh loop of the policy above (what `asyncio.run` does otherwise)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)
