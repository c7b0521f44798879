"""One OpenAI-compatible endpoint: the HTTP client, one tenacity retry policy, error classes, live counters.

Every HTTP call (probe, chat mode, judges) goes through `Endpoint.post_json`, which guarantees: a returned body is a
JSON object, with a non-empty `choices` of well-formed choices for `completions` / `chat/completions` (anything else
is retried like a 5xx); a body is read no further than its cap (an oversized one fails at once); API keys are
scrubbed from every server-provided text; a request that gave up without any sign of life from the server carries
`RequestFailed.endpoint_down`; a caller that can put a timed-out request behind the ones not yet tried asks for
`RetryLater` (`defer=True`). `Endpoint.check` reads `/models` before the first request and refuses a model not
listed there (exit 2; `--no-model-check` for routers and gateways).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import orjson
from pydantic import BaseModel, Field
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter, wait_random

from userturn.client.http import http_client
from userturn.client.http.health import UNCOUNTED_KINDS, EndpointHealth
from userturn.client.http.http_client import TRANSPORT_ERRORS, HttpReply, ResponseTooLarge, classify, describe, send
from userturn.client.http.keys import key_note, key_origin, read_key
from userturn.client.http.ratelimit import AdaptiveLimit
from userturn.client.http.redact import redact, redact_bytes, register_secret
from userturn.client.http.replies import (
    MAX_RETRY_AFTER_S,
    UNBOUNDED_RESPONSE_CAP,
    ReplyShape,
    body_problem,
    error_text,
    one_line,
    parse_retry_after,
    reply_shape,
    response_cap_for,
    server_message,
)
from userturn.client.http.urls import PREFLIGHT_HINTS, likely_base, proxy_hint, split_base_url
from userturn.core import defaults
from userturn.core.errors import EndpointError, RequestFailed, RetryableError, RetryLater, UserError

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})
GATEWAY_STATUS = frozenset({502, 503, 504})  # a proxy or gateway answering for a server it cannot reach
FATAL_STATUS = frozenset({401, 403, 404})  # the whole run is wrong: abort, keep completed records

MODELS_RESPONSE_CAP = 16 << 20  # GET /models
SHOWN_MODELS = 8  # served ids named in the wrong-model line
USER_AGENT = (f"userturn (Python {sys.version_info[0]}.{sys.version_info[1]}; httpx {httpx.__version__} over "
              f"aiohttp {aiohttp.__version__})")


class EndpointConfig(BaseModel):
    """How to reach and treat one OpenAI-compatible endpoint."""

    base_url: str = Field(description="e.g. http://127.0.0.1:30000/v1")
    api_key_env: str = defaults.API_KEY_ENV
    api_key_file: str | None = Field(default=None, description="file holding the key (wins over api_key_env)")
    request_timeout: float = Field(default=defaults.REQUEST_TIMEOUT_S, gt=0, description="per-attempt deadline, s")
    max_retries: int = Field(default=defaults.MAX_RETRIES, ge=0)
    concurrency: int = Field(default=defaults.CONCURRENCY, ge=1)
    backoff_initial: float = Field(default=defaults.BACKOFF_INITIAL_S, ge=0)
    backoff_max: float = Field(default=defaults.BACKOFF_MAX_S, ge=0)
    max_response_bytes: int | None = Field(
        default=None, ge=1, description="cap on every response body; default: derived from each request's max_tokens")
    hung_after: float = Field(default=defaults.HUNG_AFTER_TIMEOUTS, gt=0,
                              description="request timeouts without any answer (while distinct requests' first "
                                          "attempts time out) that stop the run")
    loading_max_s: float = Field(default=defaults.LOADING_MAX_S, gt=0,
                                 description="how long 503s with Retry-After (a server loading) are waited for")
    throttled_max_s: float = Field(default=defaults.THROTTLED_MAX_S, gt=0,
                                   description="how long nothing but 429s is waited for (waits included)")


class ServedModel(BaseModel):
    """One entry of `/models`: its id, and the weights it was loaded from where the server says (SGLang, vLLM)."""

    id: str
    root: str | None = None


def root_mismatch(served: list[ServedModel], model: str, tokenizer: str | None) -> str | None:
    """A one-line warning when the served `model`'s `root` names other weights than `tokenizer` (by their last path
    component, case-insensitively: a hub id and a local copy agree); None when they agree or either is unknown."""
    root = next((m.root for m in served if m.id == model), None)
    if not root or not tokenizer or _weights_name(root) == _weights_name(tokenizer):
        return None
    return (f"the server loaded {model!r} from {root}, but prompts are rendered with the tokenizer {tokenizer}: "
            "check that the chat template is that model's")


def _weights_name(path: str) -> str:
    """`Qwen/Qwen3-8B`, `/models/qwen3-8b/` -> `qwen3-8b`; a GGUF file without its suffix."""
    return path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf").lower()


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
        now = time.monotonic()
        return now - min(self.inflight.values(), default=now)


@dataclass
class CallResult:
    data: dict[str, Any]
    attempts: int
    latency_s: float


class Endpoint:
    """An OpenAI-compatible base URL with a pooled async client and the retry policy. `transport` replaces the
    network (tests: `httpx.MockTransport`)."""

    def __init__(self, config: EndpointConfig, stats: EndpointStats | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self._prefix, self._query = split_base_url(config.base_url)
        self.base_url = self._prefix + self._query
        http_client.check_environment_proxy(self.base_url)
        self.stats = stats or EndpointStats()
        headers = {"content-type": "application/json", "accept": "application/json", "user-agent": USER_AGENT}
        key = read_key(config.api_key_env, config.api_key_file)
        if key:
            headers["authorization"] = f"Bearer {key}"
            register_secret(key, key_origin(config.api_key_env, config.api_key_file))
        self.key_sent = key is not None
        self._client = http_client.make_client(
            headers=headers, concurrency=config.concurrency, connect_timeout=min(10.0, config.request_timeout),
            request_timeout=config.request_timeout, transport=transport)
        self._ids = itertools.count()
        self._backoff = wait_exponential_jitter(multiplier=config.backoff_initial, max=config.backoff_max,
                                                jitter=config.backoff_initial)
        # a 429 waits one backoff step, not a growing one: the endpoint's in-flight limit paces every request
        self._throttle_backoff = wait_random(config.backoff_initial, 2 * config.backoff_initial)
        self._retry_if = retry_if_exception_type(RetryableError)
        self.health = EndpointHealth(self.base_url, request_timeout=config.request_timeout,
                                     hung_after=config.hung_after, loading_max_s=config.loading_max_s,
                                     throttled_max_s=config.throttled_max_s)
        self.limit = AdaptiveLimit(config.concurrency)  # lowered by 429s
        self._targets: dict[str, httpx.URL] = {}  # path -> its URL, parsed once (httpx parses a str per request)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Endpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def url(self, path: str) -> str:
        return f"{self._prefix}/{path.lstrip('/')}{self._query}"

    async def check(self, model: str | None = None) -> list[ServedModel]:
        """The served models ([] when the server has no readable list). EndpointError (exit 3) if the endpoint is
        unusable; UserError (exit 2) when a readable list does not name `model` (unless `--no-model-check`)."""
        url = self.url("models")
        deadline = min(15.0, self.config.request_timeout)
        try:
            async with asyncio.timeout(deadline):
                reply = self._scrubbed(await send(self._client, "GET", url, None,
                                                  self.config.max_response_bytes or MODELS_RESPONSE_CAP))
        except ResponseTooLarge:
            return []  # a model list too long to read: the real requests will tell
        except TimeoutError:
            raise EndpointError(f"cannot reach {url}: no answer within {deadline:g}s") from None
        except TRANSPORT_ERRORS as exc:
            raise EndpointError(f"cannot reach {url}: {redact(describe(exc))}{proxy_hint(exc)}") from None
        if reply.status not in GATEWAY_STATUS:
            self.health.answered()
        if reply.status in (401, 403):
            what = "refused the API key" if self.key_sent else "requires an API key"
            raise EndpointError(f"{url} {what} (HTTP {reply.status}): {server_message(reply)} "
                                + key_note(self.config.api_key_env, self.config.api_key_file, self.key_sent))
        if reply.status == 404:  # some servers have no /models; a base URL without its /v1 neither
            await self._check_base(url)
        elif 400 <= reply.status < 500 and reply.status not in (408, 429):
            raise EndpointError(f"{url} refused the preflight request with HTTP {reply.status}: "
                                f"{server_message(reply)}{PREFLIGHT_HINTS.get(reply.status, '')}; nothing was sent")
        served = served_models(reply) if reply.status < 400 else None
        if served is None:
            return []
        ids = [m.id for m in served]
        if model is not None and http_client.NETWORK.check_model and model not in ids:
            more = f" and {len(ids) - SHOWN_MODELS} more" if len(ids) > SHOWN_MODELS else ""
            named = ", ".join(ids[:SHOWN_MODELS]) or "none"
            raise UserError(f"{url} does not serve model {model!r} (it serves: {named}{more}); fix the model "
                            "name, or pass --no-model-check for a router or gateway whose list does not name it")
        return served

    async def root_json(self, route: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """GET `route` under the server's root (the base URL without its `/v1`, where SGLang's `/model_info` and
        llama-server's `/props` live), or POST `body` to it (Ollama's `/api/show`): its JSON object, or None when the
        server answers none (what such a route reports is informational: the run goes on without it)."""
        url = f"{self._prefix.removesuffix('/v1')}/{route.lstrip('/')}{self._query}"
        method, content = ("GET", None) if body is None else ("POST", orjson.dumps(body))
        try:
            async with asyncio.timeout(min(15.0, self.config.request_timeout)):
                reply = await send(self._client, method, url, content, MODELS_RESPONSE_CAP)
            data = orjson.loads(reply.content) if reply.status < 400 else None
        except (ResponseTooLarge, orjson.JSONDecodeError, *TRANSPORT_ERRORS):
            return None
        return data if isinstance(data, dict) else None

    async def _check_base(self, url: str) -> None:
        """After a 404 on `url` (the model list): UserError naming the likely base URL when that one lists models."""
        base = likely_base(self._prefix)
        if base is None:
            return
        try:
            async with asyncio.timeout(min(15.0, self.config.request_timeout)):
                reply = await send(self._client, "GET", f"{base}/models{self._query}", None, MODELS_RESPONSE_CAP)
        except (ResponseTooLarge, *TRANSPORT_ERRORS):
            return
        if reply.status < 400 and served_models(reply):
            raise UserError(f"{url} answered HTTP 404, and {base}/models lists models: did you mean --base-url "
                            f"{base + self._query}?")

    @staticmethod
    def _scrubbed(reply: HttpReply) -> HttpReply:
        content, reason = redact_bytes(reply.content), redact(reply.reason)
        return reply if content is reply.content and reason == reply.reason else reply._replace(
            content=content, reason=reason)

    async def _attempt(self, url: str, target: httpx.URL, body: bytes, cap: int, shape: ReplyShape,
                       first: bool) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.config.request_timeout):  # one deadline per attempt (httpx's: per phase)
                reply = await send(self._client, "POST", target, body, cap)
        except ResponseTooLarge as exc:
            self.health.answered(first)
            raise RequestFailed(f"response from {url} is too large: {exc} (cap set by {self._cap_source(cap)}; "
                                "--max-response-bytes raises it)") from None
        except httpx.TooManyRedirects:
            raise EndpointError(f"{url} redirects too many times; use the final URL as the base URL") from None
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(url, exc, first) from None
        return self._reply_data(url, reply, shape, first)

    def _cap_source(self, cap: int) -> str:
        if self.config.max_response_bytes:
            return "--max-response-bytes"
        return "the default for requests without max_tokens" if cap == UNBOUNDED_RESPONSE_CAP else "max_tokens"

    def _transport_error(self, url: str, exc: BaseException, first: bool) -> RetryableError:
        """The RetryableError of an attempt that got no usable HTTP response."""
        kind = classify(exc)
        if kind == "timeout":
            return RetryableError(f"timeout after {self.config.request_timeout:g}s", kind="timeout")
        detail = redact(describe(exc))
        if kind == "malformed":
            self.health.answered(first)  # the server is there, it just answered garbage
            return RetryableError(f"malformed response from {url}: {detail}", kind="malformed")
        return RetryableError(f"connection error: {detail}", kind=kind)

    def _reply_data(self, url: str, reply: HttpReply, shape: ReplyShape, first: bool) -> dict[str, Any]:
        """The JSON body of a reply; RetryableError or RequestFailed for a status or body that is not a good one."""
        status = reply.status
        retry_after = parse_retry_after(reply.retry_after)
        loading = status == 503 and retry_after is not None  # a server loading (or draining) says when to come back
        if status not in GATEWAY_STATUS or loading:
            self.health.answered(first)
        reply = self._scrubbed(reply)
        if 300 <= status < 400:  # a redirect without a Location to follow
            raise RequestFailed(f"HTTP {status} from {url}: no Location to follow; use the final URL as the base URL",
                                status=status)
        if status >= 400:
            message = f"HTTP {status} from {url}: {server_message(reply)}"
            after = "" if retry_after is None else f" (Retry-After: {redact(one_line(reply.retry_after or '', 40))})"
            if loading:
                raise RetryableError(message + after, retry_after, kind="loading")
            if status == 429:  # a rate limit, whatever it says about when to come back
                raise RetryableError(message + after, retry_after, kind="throttled")
            if status in RETRYABLE_STATUS or status >= 500:
                raise RetryableError(message, retry_after, kind="gateway" if status in GATEWAY_STATUS else "http")
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

    def _wait(self, exc: RetryableError, state: RetryCallState) -> float:
        """Seconds before the next attempt after `exc`: a 429 waits the larger of its Retry-After and one backoff
        step (the in-flight limit it lowered paces the requests; a growing wait per request would add to that), a
        503 loading the larger of its Retry-After (capped) and the growing backoff (a `Retry-After: 0` is no reason
        to poll), another Retry-After is waited (capped), anything else backs off."""
        if exc.kind == "throttled":
            return max(exc.retry_after or 0.0, float(self._throttle_backoff(state)))
        backoff = float(self._backoff(state))
        if exc.retry_after is None:
            return backoff
        capped = min(exc.retry_after, MAX_RETRY_AFTER_S)
        return max(capped, backoff) if exc.kind == "loading" else capped

    async def post_json(self, path: str, payload: dict[str, Any] | bytes, *, response_cap: int | None = None,
                        defer: bool = False, tried: int = 0) -> CallResult:
        """POST `payload` (a dict, or its JSON bytes) to `path`, retrying retryable failures; RequestFailed when it
        gives up (with `endpoint_down` when the endpoint is down, hung, still loading or throttled past its bounds:
        client.http.health), EndpointError for a fatal status (401/403/404, a redirect that leads nowhere). A 429
        lowers the endpoint's in-flight limit and a 503 with Retry-After is waited for, neither spending an attempt.
        `defer`: a first attempt that times out raises RetryLater instead of being retried here (the caller sends
        it again after the requests not yet tried, with `tried=1`: the attempts already spent). The body is capped
        at `max_response_bytes`, else `response_cap`, else the cap of a dict payload's max_tokens, else
        `UNBOUNDED_RESPONSE_CAP`."""
        url = self.url(path)
        target = self._targets.get(path)
        if target is None:
            target = self._targets[path] = httpx.URL(url)
        if isinstance(payload, bytes):
            body = payload
        else:
            body = orjson.dumps(payload)
            response_cap = response_cap or response_cap_for(payload)
        cap = self.config.max_response_bytes or response_cap or UNBOUNDED_RESPONSE_CAP
        shape = reply_shape(path)
        stats, health, limit = self.stats, self.health, self.limit
        token = next(self._ids)
        start = time.monotonic()
        stats.inflight[token] = start
        if tried:
            stats.retries += 1  # a request put behind the others (RetryLater) is sent again
        else:
            stats.requests += 1
        attempts = 0
        counted = tried  # attempts that spend the retry budget (not: throttled, loading)
        budget = self.config.max_retries + 1
        first: RetryableError | None = None
        failed_at = start
        wait = 0.0
        retrying = AsyncRetrying(retry=self._retry_if, stop=lambda _: counted >= budget, wait=lambda _: wait,
                                 reraise=True, before_sleep=self._count_retry)
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    fresh = counted == 0  # the request's first attempt (throttled or loading ones aside)
                    taken_at = await limit.acquire()
                    try:
                        data = await self._attempt(url, target, body, cap, shape, fresh)
                    except RetryableError as exc:
                        if first is None:
                            first, failed_at = exc, time.monotonic()
                        if exc.kind not in UNCOUNTED_KINDS:
                            counted += 1
                        elif exc.kind == "throttled":
                            limit.overloaded(taken_at)
                        wait = self._wait(exc, attempt.retry_state)
                        stop = health.stop_reason(exc, first=fresh, wait=wait)
                        if stop is not None:
                            raise RequestFailed(exc.reason, attempts=attempts, endpoint_down=stop) from None
                        if defer and fresh and exc.kind == "timeout":
                            raise RetryLater(exc.reason) from None
                        raise
                    finally:
                        limit.release()
                    health.succeeded()
                    limit.succeeded()
                    return CallResult(data=data, attempts=attempts + tried, latency_s=time.monotonic() - start)
            raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises the last error
        except RetryableError as last:
            assert first is not None
            stats.failures += 1
            raise self._give_up(first, last, attempts + tried, failed_at) from None
        except RequestFailed as exc:
            exc.attempts = attempts + tried
            stats.failures += 1
            if exc.status in FATAL_STATUS or (exc.status is not None and 300 <= exc.status < 400):
                hint = likely_base(self._prefix) if exc.status == 404 else None
                raise EndpointError(exc.reason + (f"; did you mean --base-url {hint}?" if hint else ""),
                                    resumable=exc.status != 404) from None
            raise
        finally:
            stats.inflight.pop(token, None)

    def _give_up(self, first: RetryableError, last: RetryableError, attempts: int, failed_at: float) -> RequestFailed:
        """The RequestFailed for a request out of attempts, marked `endpoint_down` by the health rule."""
        down = self.health.down_reason(first, last, attempts, failed_at)
        reason = last.reason if attempts == 1 else f"{last.reason} (gave up after {attempts} attempts)"
        return RequestFailed(reason, attempts=attempts, endpoint_down=down)

    def _count_retry(self, state: RetryCallState) -> None:
        self.stats.retries += 1


def served_models(reply: HttpReply) -> list[ServedModel] | None:
    """The entries of a `/models` reply (`{"data": [{"id": ..., "root": ...}, ...]}`); None when it is no such list."""
    try:
        data = orjson.loads(reply.content).get("data")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return [ServedModel(id=m["id"], root=m.get("root") if isinstance(m.get("root"), str) else None)
            for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
