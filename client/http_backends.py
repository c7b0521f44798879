"""Two ways to move request bytes; `Endpoint` puts the retry policy and error classes on top of either.

- `httpx`: `httpx.AsyncClient` over an aiohttp transport (`httpx-aiohttp`). The httpx API, so respx can mock it
  (`respx.mock(using="httpx")`); ~1,000 req/s on a 2-core loopback.
- `aiohttp`: a bare `aiohttp.ClientSession`. ~4x the httpx API's throughput on the same loopback (httpx's
  request/response models and URL parsing dominate there), so `userturn probe` uses it by default.

Both return an `HttpReply` and fail the same way, whatever library raised what (`failure_from_aiohttp` is the one
mapping; the httpx backend's aiohttp transport errors go through it too):

- `TransportFailure` with `kind` "connect" (no connection could be opened: refused, DNS, connect timeout),
  "dropped" (the connection broke: reset, closed before or during the body) or "malformed" (the bytes are not a
  valid HTTP response: bad status line, header, chunking or content encoding);
- `TimeoutError` when an attempt passes its deadline;
- `ResponseTooLarge` when the body exceeds the caller's `limit` (read no further than the limit: a declared
  Content-Length over it is refused before reading, an undeclared body is cut as soon as it passes it).

The deadline is the client library's own (aiohttp's total timeout, whose timers are coarse and cheap) for
aiohttp, an `asyncio.timeout` for httpx: around every request, the latter measured ~30% of the whole probe run's
throughput under uvloop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

import aiohttp
from aiohttp.http_exceptions import ContentEncodingError, TransferEncodingError

if TYPE_CHECKING:  # httpx loads only when the httpx backend is used (it pulls in rich at import: ~0.1 s)
    import httpx

FailureKind = Literal["connect", "dropped", "malformed"]
MAX_DETAIL = 300


class HttpReply(NamedTuple):
    status: int
    content: bytes
    reason: str
    retry_after: str | None


class TransportFailure(Exception):
    """The request did not produce a usable HTTP response; `kind` says why (see the module docstring)."""

    def __init__(self, detail: str, kind: FailureKind = "dropped") -> None:
        super().__init__(detail)
        self.detail = detail
        self.kind: FailureKind = kind


class ResponseTooLarge(Exception):
    """The response body is over the caller's limit; `declared` is its Content-Length when it sent one."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        super().__init__(f"over {limit} bytes" + (f" (Content-Length {declared})" if declared is not None else ""))
        self.limit = limit
        self.declared = declared


class Backend(Protocol):
    async def post(self, url: str, body: bytes, limit: int) -> HttpReply: ...

    async def get(self, url: str, limit: int) -> HttpReply: ...

    async def aclose(self) -> None: ...


def _describe(exc: BaseException) -> str:
    """`Type: message` on one line, shortened (aiohttp's parser errors span several lines)."""
    message = exc.message if isinstance(exc, aiohttp.ClientResponseError) else str(exc)  # not its repr'd form
    detail = " ".join(str(message).split())
    text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return text[:MAX_DETAIL]


def failure_from_aiohttp(exc: BaseException) -> TransportFailure | TimeoutError:
    """The backend-neutral failure for an aiohttp exception (or a bare TimeoutError)."""
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return TransportFailure(_describe(exc), "connect")
    if isinstance(exc, TimeoutError):  # incl. aiohttp's read timeouts
        return TimeoutError()
    if isinstance(exc, aiohttp.ClientPayloadError):
        bad_encoding = isinstance(exc.__cause__, ContentEncodingError | TransferEncodingError)
        return TransportFailure(_describe(exc), "malformed" if bad_encoding else "dropped")
    if type(exc) is aiohttp.ClientResponseError:  # what aiohttp's parser raises for a bad status line or header
        return TransportFailure(_describe(exc), "malformed")
    return TransportFailure(_describe(exc), "dropped")


def failure_from_httpx(exc: BaseException) -> TransportFailure | TimeoutError:
    """The same mapping for what the httpx API raises: an aiohttp cause decides; httpx's own classes otherwise."""
    import httpx

    cause = exc if isinstance(exc, aiohttp.ClientError) else exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return failure_from_aiohttp(cause)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return TransportFailure(_describe(exc), "connect")
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return TimeoutError()
    if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError):
        return TransportFailure(_describe(exc), "malformed")
    return TransportFailure(_describe(exc), "dropped")


async def read_capped(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """Join `chunks`, raising ResponseTooLarge as soon as they pass `limit` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(limit)
        parts.append(chunk)
    return b"".join(parts)


class HttpxBackend:
    """httpx API (respx-mockable) over an aiohttp transport."""

    def __init__(self, headers: dict[str, str], concurrency: int, connect_timeout: float,
                 request_timeout: float) -> None:
        import httpx
        from httpx_aiohttp import HttpxAiohttpClient

        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.client: httpx.AsyncClient = HttpxAiohttpClient(
            headers=headers, limits=limits, timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            trust_env=False, follow_redirects=True,  # as aiohttp does
        )
        self._deadline = request_timeout

    async def _send(self, method: str, url: str, body: bytes | None, limit: int) -> HttpReply:
        import httpx

        try:
            async with asyncio.timeout(self._deadline):  # a whole-attempt deadline (httpx's are per phase)
                response = await self.client.send(self.client.build_request(method, url, content=body), stream=True)
                try:
                    declared = response.headers.get("content-length")
                    if declared is not None and declared.isdigit() and int(declared) > limit:
                        raise ResponseTooLarge(limit, int(declared))
                    content = await read_capped(response.aiter_bytes(), limit)
                finally:
                    await response.aclose()
        except (httpx.HTTPError, aiohttp.ClientError, TimeoutError) as exc:
            # httpx-aiohttp maps some aiohttp errors (a dropped connection becomes ConnectTimeout) and lets others
            # through unmapped (a malformed header): the aiohttp exception underneath decides either way.
            raise failure_from_httpx(exc) from None
        return HttpReply(response.status_code, content, response.reason_phrase, response.headers.get("retry-after"))

    async def post(self, url: str, body: bytes, limit: int) -> HttpReply:
        return await self._send("POST", url, body, limit)

    async def get(self, url: str, limit: int) -> HttpReply:
        return await self._send("GET", url, None, limit)

    async def aclose(self) -> None:
        await self.client.aclose()


class AiohttpBackend:
    """A bare aiohttp session, created on first use inside the running loop."""

    def __init__(self, headers: dict[str, str], concurrency: int, connect_timeout: float,
                 request_timeout: float) -> None:
        self._headers = headers
        self._concurrency = concurrency
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._concurrency, ttl_dns_cache=300, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, timeout=self._timeout, trust_env=False
            )
        return self._session

    async def _send(self, method: str, url: str, body: bytes | None, limit: int) -> HttpReply:
        try:
            async with self._get_session().request(method, url, data=body) as response:
                declared = response.content_length
                if declared is not None and declared > limit:
                    response.close()  # do not read it, do not reuse the connection
                    raise ResponseTooLarge(limit, declared)
                if declared is not None and "Content-Encoding" not in response.headers:
                    content = await response.read()  # the hot path: a declared, plain body within the limit
                else:  # undeclared or compressed: count the bytes as they are decoded
                    try:
                        content = await read_capped(response.content.iter_any(), limit)
                    except ResponseTooLarge:
                        response.close()
                        raise
                return HttpReply(response.status, content, response.reason or "", response.headers.get("Retry-After"))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise failure_from_aiohttp(exc) from None

    async def post(self, url: str, body: bytes, limit: int) -> HttpReply:
        return await self._send("POST", url, body, limit)

    async def get(self, url: str, limit: int) -> HttpReply:
        return await self._send("GET", url, None, limit)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def make_backend(name: str, *, headers: dict[str, str], concurrency: int, connect_timeout: float,
                 request_timeout: float) -> Backend:
    if name == "aiohttp":
        return AiohttpBackend(headers, concurrency, connect_timeout, request_timeout)
    if name == "httpx":
        return HttpxBackend(headers, concurrency, connect_timeout, request_timeout)
    raise ValueError(f"unknown HTTP backend {name!r} (httpx or aiohttp)")
