"""Readiness: poll a server's health routes until they answer 200, watching its PID and a startup deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from userturn.serve.process import ABORT, ServerProcess, ServerStartError, start_error

POLL_INTERVAL_S = 0.5
PROGRESS_EVERY_S = 15.0  # a line this often while a server starts, so a long first start is never silent


def _failure(proc: ServerProcess, what: str) -> ServerStartError:
    return start_error(f"{proc.spec.name}: {what}", proc.log_path, proc.tail())


def wait_until_ready(proc: ServerProcess, deadline: float, say: Callable[[str], None] | None = None) -> None:
    """Block until every health path of `proc` answers 200 in order; raise ServerStartError if it dies or the
    monotonic `deadline` passes. Never hangs: each request is bounded by the time left. `say` gets a line every
    PROGRESS_EVERY_S seconds: how long it has waited and the last line of the server's log."""
    spec = proc.spec
    started = time.monotonic()
    next_line = started + PROGRESS_EVERY_S
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else None
    with httpx.Client(trust_env=False, headers=headers) as client:
        for path in spec.health_paths:
            url = spec.url + path
            while True:
                if ABORT.is_set():
                    raise _failure(proc, "launch cancelled")
                code = proc.returncode()
                if code is not None:
                    raise _failure(proc, f"exited with code {code} during startup")
                left = deadline - time.monotonic()
                if left <= 0:
                    waited = time.monotonic() - started
                    raise _failure(proc, f"not ready after {waited:.0f}s (startup_timeout; waiting for {path})")
                try:
                    r = client.get(url, timeout=httpx.Timeout(min(left, 60.0), connect=min(left, 2.0)))
                    if r.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if say is not None and time.monotonic() >= next_line:
                    next_line += PROGRESS_EVERY_S
                    last = proc.tail()[-1:] or ["(nothing logged yet)"]
                    say(f"{spec.name}: still starting ({time.monotonic() - started:.0f}s); its log says: {last[0]}")
                time.sleep(min(POLL_INTERVAL_S, max(deadline - time.monotonic(), 0)))
