"""One OpenAI-compatible endpoint: pooled HTTP, tenacity retries, error classes, live counters.

Every HTTP call userturn makes (probe completions, chat completions, judge calls) goes through
`Endpoint.post_json`, so retry policy, deadlines and error messages are the same everywhere.
The bytes move through one of two backends (client.http_backends): `httpx` (the default; respx can mock it)
or `aiohttp` (what `userturn probe` uses for throughput; measured ~4x faster on loopback, see README).
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import BaseModel, Field
from userturn.client.errors import EndpointError
from userturn.client.http_backends import Backend, HttpReply, TransportFailure, make_backend

if TYPE_CHECKING:  # tenacity loads on the first retry: a run without one never pays its import
    from tenacity import RetryCallState

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
FATAL_STATUS = frozenset({401, 403, 404})  # the whole run is wrong: abort, keep completed records
MAX_RETRY_AFTER_S = 120.0


class EndpointConfig(BaseModel):
    """How to reach and treat one OpenAI-compatible endpoint."""

    base_url: str = Field(description="e.g. http://127.0.0.1:30000/v1")
    api_key_env: str = "OPENAI_API_KEY"
    request_timeout: float = Field(default=300.0, gt=0, description="per-attempt deadline, seconds")
    max_retries: int = Field(default=5, ge=0)
    concurrency: int = Field(default=64, ge=1)
    backoff_initial: float = Field(default=0.5, ge=0)
    backoff_max: float = Field(default=30.0, ge=0)
    http_backend: Literal["httpx", "aiohttp"] = Field(
        default="httpx", description="httpx (respx-mockable) or aiohttp (faster; used by `userturn probe`)")

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None


class RetryableError(Exception):
    """A failure worth another attempt (429/408/5xx, reset, timeout, bad body)."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class RequestFailed(Exception):
    """A request that will not succeed: a non-retryable 4xx, or retries exhausted."""

    def __init__(self, reason: str, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.attempts = attempts


@dataclass
class EndpointStats:
    """Live counters for the progress view."""

    requests: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    inflight: dict[int, float] = field(default_factory=dict)

    def oldest_inflight_age(self) -> float:
        if not self.inflight:
            return 0.0
        return time.monotonic() - min(self.inflight.values())


@dataclass
class CallResult:
    data: dict[str, Any]
    attempts: int
    latency_s: float


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None when absent or invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, min(float(value), MAX_RETRY_AFTER_S))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, min(when.timestamp() - time.time(), MAX_RETRY_AFTER_S))


def server_message(reply: HttpReply) -> str:
    """The server's own error message, shortened to one line."""
    text = reply.content.decode("utf-8", "replace").strip()
    try:
        body = orjson.loads(text)
        err = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(err, dict):
            text = str(err.get("message") or err.get("detail") or err)
        elif isinstance(err, str):
            text = err
        elif isinstance(body, dict) and "detail" in body:
            text = str(body["detail"])
    except (orjson.JSONDecodeError, AttributeError):
        pass
    text = " ".join(text.split())
    return text[:300] or reply.reason or "no message"


class Endpoint:
    """An OpenAI-compatible base URL with a pooled async client and the retry policy."""

    def __init__(self, config: EndpointConfig, stats: EndpointStats | None = None) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.stats = stats or EndpointStats()
        headers = {"content-type": "application/json", "accept": "application/json"}
        key = config.api_key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        self._backend: Backend = make_backend(
            config.http_backend, headers=headers, concurrency=config.concurrency,
            connect_timeout=min(10.0, config.request_timeout), request_timeout=config.request_timeout,
        )
        self._ids = itertools.count()
        self._backoff: Any = None

    async def aclose(self) -> None:
        await self._backend.aclose()

    async def __aenter__(self) -> Endpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    async def check(self) -> list[str]:
        """Preflight: reach the endpoint and list its models. Raises EndpointError with one line if unusable."""
        url = self.url("models")
        try:
            async with asyncio.timeout(min(15.0, self.config.request_timeout)):
                reply = await self._backend.get(url)
        except TimeoutError:
            raise EndpointError(f"cannot reach {url}: no answer within 15s") from None
        except TransportFailure as exc:
            raise EndpointError(f"cannot reach {url}: {exc}") from None
        if reply.status in (401, 403):
            raise EndpointError(f"{url} refused the API key (HTTP {reply.status}): "
                                f"{server_message(reply)} (key from ${self.config.api_key_env})")
        if reply.status >= 400:
            return []  # some servers have no /models; the real requests will tell
        try:
            return [m["id"] for m in orjson.loads(reply.content).get("data", []) if "id" in m]
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return []

    async def _attempt(self, url: str, body: bytes) -> dict[str, Any]:
        try:
            reply = await self._backend.post(url, body)  # the backend enforces the per-attempt deadline
        except TimeoutError:
            raise RetryableError(f"timeout after {self.config.request_timeout:g}s") from None
        except TransportFailure as exc:
            raise RetryableError(f"connection error: {exc}") from None
        status = reply.status
        if status >= 400:
            message = f"HTTP {status} from {url}: {server_message(reply)}"
            if status in RETRYABLE_STATUS or status >= 500:
                raise RetryableError(message, parse_retry_after(reply.retry_after))
            raise RequestFailed(message, status=status)
        try:
            data = orjson.loads(reply.content)
        except orjson.JSONDecodeError:
            raise RetryableError(f"invalid JSON body from {url} ({len(reply.content)} bytes)") from None
        if not isinstance(data, dict):
            raise RetryableError(f"unexpected JSON body from {url}: not an object")
        if "error" in data and "choices" not in data:
            raise RetryableError(f"error body from {url}: {str(data['error'])[:200]}")
        return data

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            return exc.retry_after
        if self._backoff is None:
            from tenacity import wait_exponential_jitter

            c = self.config
            self._backoff = wait_exponential_jitter(multiplier=c.backoff_initial, max=c.backoff_max,
                                                    jitter=c.backoff_initial)
        return self._backoff(state)

    async def post_json(self, path: str, payload: dict[str, Any] | bytes) -> CallResult:
        """POST `payload` (a dict, or its JSON bytes) to `path`, retrying retryable failures. Raises RequestFailed
        when it gives up.

        Fatal statuses (401/403/404) raise EndpointError so the caller can stop the run.
        """
        url = self.url(path)
        body = payload if type(payload) is bytes else orjson.dumps(payload)
        stats = self.stats
        token = next(self._ids)
        start = time.monotonic()
        stats.inflight[token] = start
        stats.requests += 1
        attempts = 0
        try:
            # Fast path: one plain attempt; tenacity takes over only after a retryable failure.
            attempts = 1
            try:
                data = await self._attempt(url, body)
            except RetryableError as first:
                if self.config.max_retries == 0:
                    raise RequestFailed(first.reason, attempts=1) from None
                data, extra = await self._retry(url, body, first)
                attempts += extra
            return CallResult(data=data, attempts=attempts, latency_s=time.monotonic() - start)
        except RequestFailed as exc:
            exc.attempts = max(exc.attempts, attempts)
            stats.failures += 1
            if exc.status in FATAL_STATUS:
                raise EndpointError(exc.reason) from None
            raise
        finally:
            stats.inflight.pop(token, None)

    async def _retry(self, url: str, body: bytes, first: RetryableError) -> tuple[dict[str, Any], int]:
        """Retry after a first retryable failure; returns (data, attempts made here)."""
        self.stats.retries += 1
        await asyncio.sleep(first.retry_after if first.retry_after is not None else self.config.backoff_initial)
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(RetryableError),
            stop=stop_after_attempt(self.config.max_retries),
            wait=self._wait,
            reraise=True,
            before_sleep=self._count_retry,
        )
        made = 0
        try:
            async for attempt in retrying:
                with attempt:
                    made += 1
                    return await self._attempt(url, body), made
        except RetryableError as last:
            raise RequestFailed(f"{last.reason} (gave up after {made + 1} attempts)", attempts=made + 1) from None
        except RequestFailed as failed:  # a non-retryable answer after some retries: count them all
            failed.attempts = made + 1
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _count_retry(self, state: RetryCallState) -> None:
        self.stats.retries += 1
