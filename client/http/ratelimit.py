"""Async token buckets for requests-per-minute and tokens-per-minute limits."""

from __future__ import annotations

import asyncio
import time


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
