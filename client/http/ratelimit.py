"""Async token buckets for requests-per-minute and tokens-per-minute limits, and the adaptive in-flight limit."""

from __future__ import annotations

import asyncio
import time
from collections import deque


class TokenBucket:
    """A bucket holding up to `capacity` units, refilled at `per_minute / 60` units per second. `acquire(n)` waits
    for `n` units, at most the capacity (a huge request passes after waiting for a full bucket)."""

    def __init__(self, per_minute: float, capacity: float | None = None) -> None:
        if per_minute <= 0:
            raise ValueError("rate limit must be positive")
        self.rate = per_minute / 60.0
        self.capacity = float(capacity if capacity is not None else per_minute)
        self._level = self.capacity
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
        self._stamp = now

    async def acquire(self, amount: float = 1.0) -> None:
        amount = min(float(amount), self.capacity)
        async with self._lock:  # FIFO: waiters are served in arrival order
            self._refill()
            while self._level < amount - 1e-9:
                await asyncio.sleep(max((amount - self._level) / self.rate, 0.001))
                self._refill()
            self._level -= amount

    def refund(self, amount: float) -> None:
        """Give back units charged in advance but not used (e.g. estimated tokens above actual usage)."""
        self._refill()
        self._level = min(self.capacity, self._level + max(0.0, amount))


class RateLimiter:
    """Optional RPM and TPM buckets applied before each request."""

    def __init__(self, rpm: float | None = None, tpm: float | None = None) -> None:
        self.requests = TokenBucket(rpm, capacity=max(1.0, rpm / 60.0)) if rpm else None
        self.tokens = TokenBucket(tpm) if tpm else None

    @property
    def active(self) -> bool:
        return self.requests is not None or self.tokens is not None

    async def acquire(self, estimated_tokens: int = 0) -> None:
        if self.requests is not None:
            await self.requests.acquire(1)
        if self.tokens is not None and estimated_tokens:
            await self.tokens.acquire(estimated_tokens)

    def settle(self, estimated_tokens: int, actual_tokens: int | None) -> None:
        """Refund the difference once the server reported real usage."""
        if self.tokens is not None and actual_tokens is not None and actual_tokens < estimated_tokens:
            self.tokens.refund(estimated_tokens - actual_tokens)


class AdaptiveLimit:
    """An in-flight limit between 1 and `ceiling`, adapted by additive increase and multiplicative decrease (as
    TCP's congestion window and adaptive concurrency limiters do): `overloaded` halves it, each `succeeded` adds
    1/limit (one more slot per limit's worth of successes). At one slot, a server still refusing (it answers faster
    than its rate limit allows) gets paced: a gap between request starts, started at `FIRST_GAP_S` and doubled by
    each refusal from the `GROW_AFTER`-th in a row on (at most `MAX_GAP_S`), halved by each success; the limit
    grows again once the gap is gone. A rate limit refuses in long runs, and the gap grows until the runs end; a
    gateway refusing a share of requests at random (up to half of them) refuses three times in a row far less
    often than it answers, and the gap stays near zero (a gap that only grew would slow such a run without end).

    `acquire` waits, in arrival order, while `floor(limit)` slots are taken (and for the gap), and returns the
    number of decreases so far: an overload seen by a slot taken before the last decrease is the same overload and
    does not decrease again."""

    FIRST_GAP_S = 0.05
    MIN_GAP_S = 0.001
    MAX_GAP_S = 2.0
    GROW_AFTER = 3  # refusals in a row (since the last success) that start or double the gap

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError("the in-flight limit must be at least 1")
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.gap = 0.0  # seconds between request starts, at one slot
        self.refused_in_row = 0  # refusals since the last success
        self.in_flight = 0
        self.decreases = 0
        self._next_start = 0.0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _room(self) -> bool:
        return self.in_flight < int(self.limit)

    async def acquire(self) -> int:
        """Take a slot (waiting for one, then for the gap); the decrease count at that moment (for
        `overloaded`)."""
        if self._room() and not self._waiters:
            self.in_flight += 1
        else:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # handed a slot, then cancelled: pass it on
                    self.release()
                else:
                    self._waiters.remove(waiter)
                raise
        if self.gap:
            now = time.monotonic()
            start, self._next_start = max(now, self._next_start), max(now, self._next_start) + self.gap
            if start > now:
                try:
                    await asyncio.sleep(start - now)
                except asyncio.CancelledError:
                    self.release()
                    raise
        return self.decreases

    def release(self) -> None:
        """Give a slot back (once per `acquire`)."""
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._room():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    def succeeded(self) -> None:
        """A request went through: half the gap, or (without one) one more slot after `limit` of them, up to the
        ceiling."""
        self.refused_in_row = 0
        if self.gap:
            self.gap = self.gap / 2 if self.gap / 2 >= self.MIN_GAP_S else 0.0
        elif self.limit < self.ceiling:
            self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)
            self._wake()

    def overloaded(self, taken_at: int) -> bool:
        """The server refused a request sent from a slot taken when `taken_at` decreases had happened: halve the
        limit, or at one slot (from the `GROW_AFTER`-th refusal in a row) start or double the gap, up to
        `MAX_GAP_S`, unless that was done since; True when it was done now."""
        if taken_at != self.decreases:
            return False
        self.refused_in_row += 1
        if self.limit >= 2:
            self.limit /= 2
        else:
            self.limit = 1.0
            if self.refused_in_row >= self.GROW_AFTER:
                self.gap = min(max(2 * self.gap, self.FIRST_GAP_S), self.MAX_GAP_S)
        self.decreases += 1
        return True
