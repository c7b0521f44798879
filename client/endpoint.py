"""One OpenAI-compatible endpoint: pooled HTTP, tenacity retries, error classes, live counters.

Every HTTP call userturn makes (probe completions, chat completions, judge calls) goes through
`Endpoint.post_json`, so retry policy, deadlines, response checks and error messages are the same everywhere.
The bytes move through one of three backends (client.http_backends): `httpx` (the default; respx can mock it),
`aiohttp`, or `httptools` (client.httptools_backend: what `userturn probe` uses for throughput; ~3x less client
CPU per request than aiohttp on loopback, see README).

What `post_json` guarantees its callers:

- a returned body is a JSON object; for `completions` / `chat/completions` it has a non-empty `choices` list whose
  every choice has `text` (a string) / a `message` object with `content` (string, null or a list of parts).
  Anything else (truncated or non-JSON body, `choices: []`, a malformed HTTP header) is retried like a 5xx;
- a body is read no further than its cap (`response_cap`: generous bytes per token x max_tokens + 1 MiB, or
  `EndpointConfig.max_response_bytes`); an oversized response fails the request at once (not retried);
- every server-provided text (bodies, reason phrases, exception texts) has the API keys in use scrubbed
  (client.redact) before it reaches a message, a record or the returned data;
- a request that used up its retries while the endpoint was unreachable carries `RequestFailed.endpoint_down`,
  the one-line reason for the caller to stop the run (see `Endpoint._give_up`).
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
from userturn.client.http_backends import (
    Backend,
    BackendName,
    HttpReply,
    ResponseTooLarge,
    TransportFailure,
    make_backend,
)
from userturn.client.redact import redact, redact_bytes, register_secret

from userturn import defaults
from userturn.errors import EndpointError, RequestFailed, RetryableError

if TYPE_CHECKING:  # tenacity loads on the first retry: a run without one never pays its import
    from tenacity import RetryCallState

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
FATAL_STATUS = frozenset({401, 403, 404})  # the whole run is wrong: abort, keep completed records
MAX_RETRY_AFTER_S = 120.0

# The response cap: what a reply of `max_tokens` tokens can take, with room to spare. 256 bytes per token is twice
# the longest tokens of common vocabularies (~128 bytes) after JSON escaping; logprobs add an entry per alternative.
RESPONSE_OVERHEAD_BYTES = 1 << 20  # the envelope, usage, ids and whatever extra fields a server adds
BYTES_PER_TOKEN = 256
LOGPROB_BYTES = 512  # one {"token", "logprob", "bytes"} entry
UNBOUNDED_RESPONSE_CAP = 64 << 20  # a request without max_tokens
MODELS_RESPONSE_CAP = 16 << 20  # GET /models
ReplyShape = Literal["completion", "chat"] | None


class EndpointConfig(BaseModel):
    """How to reach and treat one OpenAI-compatible endpoint."""

    base_url: str = Field(description="e.g. http://127.0.0.1:30000/v1")
    api_key_env: str = defaults.API_KEY_ENV
    request_timeout: float = Field(default=defaults.REQUEST_TIMEOUT_S, gt=0, description="per-attempt deadline, s")
    max_retries: int = Field(default=defaults.MAX_RETRIES, ge=0)
    concurrency: int = Field(default=defaults.CONCURRENCY, ge=1)
    backoff_initial: float = Field(default=defaults.BACKOFF_INITIAL_S, ge=0)
    backoff_max: float = Field(default=defaults.BACKOFF_MAX_S, ge=0)
    http_backend: BackendName = Field(
        default="httpx", description="httpx (respx-mockable), aiohttp, or httptools (fastest; `userturn probe`)")
    max_response_bytes: int | None = Field(
        default=None, ge=1, description="cap on every response body; default: derived from each request's max_tokens")

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None


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


def response_cap(max_tokens: int | None, n: int = 1, logprobs: int = 0) -> int:
    """The most bytes a response to a request for `n` x `max_tokens` tokens (with `logprobs` alternatives per token,
    0 when not asked for) may take; `UNBOUNDED_RESPONSE_CAP` without max_tokens."""
    if not max_tokens or max_tokens < 1:
        return UNBOUNDED_RESPONSE_CAP
    per_token = BYTES_PER_TOKEN + (LOGPROB_BYTES * (1 + logprobs) if logprobs else 0)
    return RESPONSE_OVERHEAD_BYTES + max(1, n) * max_tokens * per_token


def _positive_int(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def response_cap_for(payload: dict[str, Any]) -> int:
    """`response_cap` from a request body's own `max_tokens` (or `max_completion_tokens`), `n` and logprobs fields
    (`logprobs: k` of the completions API; `logprobs: true` + `top_logprobs: k` of the chat API)."""
    max_tokens = _positive_int(payload.get("max_tokens")) or _positive_int(payload.get("max_completion_tokens"))
    logprobs = payload.get("logprobs")
    chat_style = logprobs is True
    alternatives = (_positive_int(payload.get("top_logprobs")) or 1) if chat_style else (_positive_int(logprobs) or 0)
    return response_cap(max_tokens, _positive_int(payload.get("n")) or 1, alternatives)


def reply_shape(path: str) -> ReplyShape:
    """What a 200 from `path` must contain: a text completion, a chat completion, or (None) any JSON object."""
    path = path.rstrip("/")
    if path.endswith("chat/completions"):
        return "chat"
    return "completion" if path.endswith("completions") else None


def body_problem(data: Any, shape: ReplyShape) -> str | None:
    """Why a 200's JSON is not a usable reply of `shape`, or None when it is."""
    if not isinstance(data, dict):
        return f"JSON {type(data).__name__} instead of an object"
    if shape is None:
        return None
    choices = data.get("choices")
    if not isinstance(choices, list):
        return "no choices list" if choices is None else f"choices is a {type(choices).__name__}, not a list"
    if not choices:
        return "choices is empty"
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            return f"choices[{i}] is not an object"
        if shape == "completion":
            if not isinstance(choice.get("text"), str):
                return f"choices[{i}].text is {'missing' if 'text' not in choice else 'not a string'}"
            continue
        message = choice.get("message")
        if not isinstance(message, dict):
            return f"choices[{i}].message is {'missing' if message is None else 'not an object'}"
        if "content" not in message:
            return f"choices[{i}].message.content is missing"
        if not isinstance(message["content"], str | list | None):
            return f"choices[{i}].message.content is not a string"
    return None


def error_text(error: Any) -> str:
    """The message of an OpenAI-style `error` value (an object with `message` or `detail`, or a string)."""
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)
    return str(error)


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def server_message(reply: HttpReply) -> str:
    """The server's own error message, shortened to one line, with API keys scrubbed."""
    return redact(_server_message(reply))


def _server_message(reply: HttpReply) -> str:
    text = reply.content.decode("utf-8", "replace").strip()
    try:
        body = orjson.loads(text)
        err = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(err, dict | str):
            text = error_text(err)
        elif isinstance(body, dict) and "detail" in body:
            text = str(body["detail"])
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return one_line(text) or reply.reason or "no message"


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
            register_secret(key, config.api_key_env)
        self._backend: Backend = make_backend(
            config.http_backend, headers=headers, concurrency=config.concurrency,
            connect_timeout=min(10.0, config.request_timeout), request_timeout=config.request_timeout,
        )
        self._ids = itertools.count()
        self._backoff: Any = None
        self._last_response = float("-inf")  # monotonic time of the last attempt the server answered

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
                reply = self._scrubbed(await self._backend.get(url, self.config.max_response_bytes
                                                               or MODELS_RESPONSE_CAP))
        except TimeoutError:
            raise EndpointError(f"cannot reach {url}: no answer within 15s") from None
        except TransportFailure as exc:
            raise EndpointError(f"cannot reach {url}: {redact(exc.detail)}") from None
        except ResponseTooLarge:
            return []  # a model list too long to read: the real requests will tell
        if reply.status in (401, 403):
            raise EndpointError(f"{url} refused the API key (HTTP {reply.status}): "
                                f"{server_message(reply)} (key from ${self.config.api_key_env})")
        if reply.status >= 400:
            return []  # some servers have no /models; the real requests will tell
        try:
            return [m["id"] for m in orjson.loads(reply.content).get("data", []) if "id" in m]
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return []

    @staticmethod
    def _scrubbed(reply: HttpReply) -> HttpReply:
        content, reason = redact_bytes(reply.content), redact(reply.reason)
        return reply if content is reply.content and reason == reply.reason else reply._replace(
            content=content, reason=reason)

    async def _attempt(self, url: str, body: bytes, cap: int, shape: ReplyShape) -> dict[str, Any]:
        try:
            reply = await self._backend.post(url, body, cap)  # the backend enforces the per-attempt deadline
        except (TimeoutError, TransportFailure, ResponseTooLarge) as exc:
            raise self._transport_error(url, cap, exc) from None
        return self._reply_data(url, reply, shape)

    def _transport_error(self, url: str, cap: int, exc: Exception) -> Exception:
        """What an attempt that got no usable reply raises: RetryableError, or RequestFailed past the cap."""
        if isinstance(exc, TimeoutError):
            return RetryableError(f"timeout after {self.config.request_timeout:g}s", kind="timeout")
        if isinstance(exc, TransportFailure):
            detail = redact(exc.detail)
            if exc.kind == "malformed":
                self._last_response = time.monotonic()  # the server is there, it just answered garbage
                return RetryableError(f"malformed response from {url}: {detail}", kind="malformed")
            return RetryableError(f"connection error: {detail}", kind=exc.kind)
        self._last_response = time.monotonic()
        source = "max_tokens"
        if self.config.max_response_bytes:
            source = "--max-response-bytes"
        elif cap == UNBOUNDED_RESPONSE_CAP:
            source = "the default for requests without max_tokens"
        return RequestFailed(f"response from {url} is too large: {exc} (cap set by {source}; "
                             "--max-response-bytes raises it)")

    def _reply_data(self, url: str, reply: HttpReply, shape: ReplyShape) -> dict[str, Any]:
        """The JSON body of a reply; RetryableError or RequestFailed for a status or body that is not a good one."""
        self._last_response = time.monotonic()
        reply = self._scrubbed(reply)
        status = reply.status
        if 300 <= status < 400:  # a redirect the backend stopped following (httptools: past ten), or could not
            where = f"redirected to {reply.location} after ten redirects" if reply.location else "no Location to follow"
            raise RequestFailed(f"HTTP {status} from {url}: {where}; use the final URL as the base URL", status=status)
        if status >= 400:
            message = f"HTTP {status} from {url}: {server_message(reply)}"
            if status in RETRYABLE_STATUS or status >= 500:
                raise RetryableError(message, parse_retry_after(reply.retry_after))
            raise RequestFailed(message, status=status)
        try:
            data = orjson.loads(reply.content)
        except orjson.JSONDecodeError:
            raise RetryableError(f"malformed response from {url}: invalid JSON ({len(reply.content)} bytes)") from None
        if isinstance(data, dict) and "error" in data and "choices" not in data:
            raise RetryableError(f"error body from {url}: {redact(one_line(error_text(data['error']), 200))}")
        problem = body_problem(data, shape)
        if problem is not None:
            raise RetryableError(f"malformed response from {url}: {problem}")
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

    async def post_json(self, path: str, payload: dict[str, Any] | bytes, *,
                        response_cap: int | None = None) -> CallResult:
        """POST `payload` (a dict, or its JSON bytes) to `path`, retrying retryable failures. Raises RequestFailed
        when it gives up.

        The response body is capped at `EndpointConfig.max_response_bytes` if set, else `response_cap` if given,
        else the cap derived from a dict payload's max_tokens (`response_cap_for`), else `UNBOUNDED_RESPONSE_CAP`.
        Fatal statuses (401/403/404) raise EndpointError so the caller can stop the run.
        """
        url = self.url(path)
        if isinstance(payload, bytes):
            body = payload
        else:
            body = orjson.dumps(payload)
            response_cap = response_cap or response_cap_for(payload)
        cap = self.config.max_response_bytes or response_cap or UNBOUNDED_RESPONSE_CAP
        shape = reply_shape(path)
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
                data = await self._attempt(url, body, cap, shape)
            except RetryableError as first:
                failed_at = time.monotonic()
                if self.config.max_retries == 0:
                    raise self._give_up(first, first, first.reason, 1, failed_at) from None
                data, extra = await self._retry(url, body, cap, shape, first, failed_at)
                attempts += extra
            return CallResult(data=data, attempts=attempts, latency_s=time.monotonic() - start)
        except RequestFailed as exc:
            exc.attempts = max(exc.attempts, attempts)
            stats.failures += 1
            if exc.status in FATAL_STATUS or (exc.status is not None and 300 <= exc.status < 400):
                raise EndpointError(exc.reason) from None
            raise
        finally:
            stats.inflight.pop(token, None)

    def _give_up(self, first: RetryableError, last: RetryableError, reason: str, attempts: int,
                 failed_at: float) -> RequestFailed:
        """The RequestFailed for a request out of attempts. It marks the endpoint down when the last attempt could
        not connect and the endpoint has answered nothing (no attempt of this request, no other request) since this
        request's first failure: a whole retry schedule without a sign of life."""
        down = None
        answered = first.kind in ("http", "malformed")  # later answers move `_last_response` past `failed_at`
        if last.kind == "connect" and not answered and self._last_response < failed_at:
            silent = time.monotonic() - failed_at
            down = (f"endpoint {self.base_url} is unreachable: nothing answered for {silent:.1f}s "
                    f"({attempts} attempts; last: {last.reason})")
        return RequestFailed(reason, attempts=attempts, endpoint_down=down)

    async def _retry(self, url: str, body: bytes, cap: int, shape: ReplyShape, first: RetryableError,
                     failed_at: float) -> tuple[dict[str, Any], int]:
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
                    return await self._attempt(url, body, cap, shape), made
        except RetryableError as last:
            raise self._give_up(first, last, f"{last.reason} (gave up after {made + 1} attempts)", made + 1,
                                failed_at) from None
        except RequestFailed as failed:  # a non-retryable answer after some retries: count them all
            failed.attempts = made + 1
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _count_retry(self, state: RetryCallState) -> None:
        self.stats.retries += 1
