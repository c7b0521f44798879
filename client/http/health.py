"""One judgement of an endpoint's health, from what its attempts got: slow, hung, down, loading or refusing. It
stops a run (exit 3, completed records kept, a rerun resumes) when the endpoint is:

- **hung**: a request's first attempt times out, nothing was answered for `hung_after` request timeouts, and the
  first attempts of at least `hung_streak()` distinct requests in a row timed out (retries neither count nor
  decide: a few items that never get an answer are error records, not a hung server). The streak is the fewest
  timeouts in a row that a live server timing out as often as this one has (at most every other first attempt)
  would give by chance less than `HUNG_CHANCE` of the time, and at least `HUNG_MIN_TIMEOUTS`;
- **down**: a request used its whole retry schedule and nothing answered since its first failure, the last attempt
  could not connect or met a gateway's 502/503/504;
- **still loading**: it has answered 503 with a Retry-After (waited for, no attempt spent) for `loading_max_s`;
- **throttled**: it has answered nothing usable but 429s (no attempt spent) for `throttled_max_s`, waits included,
  or a 429 asks for a wait that would carry past that bound (an exhausted quota).
"""

from __future__ import annotations

import math
import time

from userturn.core.errors import RetryableError

HUNG_MIN_TIMEOUTS = 3
HUNG_CHANCE = 1e-4  # how rarely a live server may be called hung by chance
HUNG_MAX_SHARE = 0.5  # the timeout share of first attempts above which a server is not told apart from a hung one
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
        self.streak = 0  # distinct requests whose first attempt timed out since `last_answer`
        self.first_answered = 0  # first attempts the server answered (any reply of its own)
        self.first_timed_out = 0  # first attempts that timed out, the current streak included
        self.loading_since: float | None = None

    def answered(self, first: bool = False) -> None:
        """The server itself answered (any reply but a gateway's 502/503/504, even a malformed one); `first`: the
        answer was to a request's first attempt."""
        self.last_answer = time.monotonic()
        self.streak = 0
        self.first_answered += first

    def succeeded(self) -> None:
        """A usable reply (already counted by `answered`): the server is neither hung, loading nor throttling."""
        self.answered()
        self.last_success = self.last_answer
        self.loading_since = None

    def hung_streak(self) -> int:
        """How many first attempts in a row must time out (nothing answered in between) to call the server hung."""
        finished = self.first_answered + self.first_timed_out
        share = min(HUNG_MAX_SHARE, self.first_timed_out / finished if finished else 1.0)
        return max(HUNG_MIN_TIMEOUTS, math.ceil(math.log(HUNG_CHANCE) / math.log(share)))

    def stop_reason(self, error: RetryableError, *, first: bool, wait: float = 0.0) -> str | None:
        """Record one failed attempt (`first`: the request's first); the one-line reason to stop the run when it
        shows the endpoint hung, still loading past its bound, or throttled past its bound (`wait`: the wait before
        the next attempt, counted as throttled), else None."""
        now = time.monotonic()
        if error.kind == "timeout":
            if not first:  # a retry's timeout says nothing new: the request may be one the server cannot answer
                return None
            self.streak += 1
            self.first_timed_out += 1
            silent = now - self.last_answer
            if self.streak >= self.hung_streak() and silent >= self.hung_after * self.request_timeout:
                return (f"endpoint {self.base_url} is hung: it answered no request for {silent:.0f}s (the first "
                        f"attempts of {self.streak} requests in a row timed out after {self.request_timeout:g}s "
                        "each; a wedged scheduler?); restart the server, or raise the request timeout if one "
                        "generation takes that long")
        elif error.kind == "loading":
            if self.loading_since is None:
                self.loading_since = now
            waited = now - self.loading_since
            if waited >= self.loading_max_s:
                return f"endpoint {self.base_url} is still loading after {waited:.0f}s: {error.reason}"
        elif error.kind == "throttled":
            if error.retry_after is not None and error.retry_after >= self.throttled_max_s:
                return (f"endpoint {self.base_url} asks to wait {error.retry_after:.0f}s before the next request, "
                        f"longer than a run waits ({self.throttled_max_s:g}s): {error.reason}; rerun the same command "
                        "once its quota is back, or lower --concurrency / set --rpm / --tpm under its limit")
            throttled = now + wait - self.last_success
            if throttled >= self.throttled_max_s:
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
