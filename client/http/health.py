"""One judgement of an endpoint's health, from what its attempts got. It stops a run (exit 3, completed records
kept, a rerun resumes) when the endpoint is:

- **down**: a request used its whole retry schedule and nothing answered since its first failure, the last attempt
  could not connect or met a gateway's 502/503/504;
- **hung**: nothing was answered for `hung_after` request timeouts while at least `HUNG_MIN_TIMEOUTS` attempts
  timed out (a server that lists its models but completes nothing);
- **still loading**: it has answered 503 with a Retry-After (waited for, no attempt spent) for `loading_max_s`;
- **throttled**: it has answered nothing but 429 without a Retry-After (no attempt spent) for `throttled_max_s`.
"""

from __future__ import annotations

import time

from userturn.core.errors import RetryableError

HUNG_MIN_TIMEOUTS = 3
DOWN_KINDS = frozenset({"connect", "gateway"})  # attempts that got no sign of life from the server itself
ANSWERED_KINDS = frozenset({"http", "malformed", "loading", "throttled"})  # the server itself answered
UNCOUNTED_KINDS = frozenset({"loading", "throttled"})  # waited for, without spending an attempt


class EndpointHealth:
    """The live state of one endpoint's health; `Endpoint` reports every attempt's outcome to it."""

    def __init__(self, base_url: str, *, request_timeout: float, hung_after: float, loading_max_s: float,
                 throttled_max_s: float) -> None:
        now = time.monotonic()
        self.base_url = base_url
        self.request_timeout = request_timeout
        self.hung_after = hung_after
        self.loading_max_s = loading_max_s
        self.throttled_max_s = throttled_max_s
        self.last_answer = now  # monotonic time of the last reply from the server itself (not a gateway's)
        self.last_success = now  # ... of the last usable reply
        self.timeouts = 0  # attempts timed out since `last_answer`
        self.loading_since: float | None = None

    def answered(self) -> None:
        """The server itself answered (any reply but a gateway's 502/503/504, even a malformed one)."""
        self.last_answer = time.monotonic()
        self.timeouts = 0

    def succeeded(self) -> None:
        """A usable reply: the server is neither hung, loading nor throttling."""
        self.answered()
        self.last_success = self.last_answer
        self.loading_since = None

    def stop_reason(self, error: RetryableError) -> str | None:
        """Record one failed attempt; the one-line reason to stop the run when it shows the endpoint hung, still
        loading past its bound, or throttled past its bound, else None."""
        now = time.monotonic()
        if error.kind == "timeout":
            self.timeouts += 1
            silent = now - self.last_answer
            if self.timeouts >= HUNG_MIN_TIMEOUTS and silent >= self.hung_after * self.request_timeout:
                return (f"endpoint {self.base_url} is hung: it answered no request for {silent:.0f}s ({self.timeouts} "
                        f"attempts timed out after {self.request_timeout:g}s each; a wedged scheduler?); restart the "
                        "server, or raise the request timeout if one generation takes that long")
        elif error.kind == "loading":
            if self.loading_since is None:
                self.loading_since = now
            waited = now - self.loading_since
            if waited >= self.loading_max_s:
                return f"endpoint {self.base_url} is still loading after {waited:.0f}s: {error.reason}"
        elif error.kind == "throttled" and now - self.last_success >= self.throttled_max_s:
            return (f"endpoint {self.base_url} refused every request for {now - self.last_success:.0f}s: "
                    f"{error.reason}; lower --concurrency or set --rpm / --tpm under its limit")
        return None

    def down_reason(self, first: RetryableError, last: RetryableError, attempts: int,
                    failed_at: float) -> str | None:
        """Why a request out of attempts shows the endpoint down, or None: its first attempt got no answer, its last
        could not connect or met a 502/503/504, and nothing (no attempt of this request or any other) has been
        answered since the first failure."""
        if last.kind not in DOWN_KINDS or first.kind in ANSWERED_KINDS or self.last_answer >= failed_at:
            return None
        silent = time.monotonic() - failed_at
        return (f"endpoint {self.base_url} is unreachable: nothing answered for {silent:.1f}s ({attempts} attempts; "
                f"last: {last.reason})")
