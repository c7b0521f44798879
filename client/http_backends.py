"""Two ways to move request bytes; `Endpoint` puts the retry policy and error classes on top of either.

- `httpx`: `httpx.AsyncClient` over an aiohttp transport (`httpx-aiohttp`). The httpx API, so respx can mock it
  (`respx.mock(using="httpx")`); ~1,000 req/s on a 2-core loopback.
- `aiohttp`: a bare `aiohttp.ClientSession`. ~4x the httpx API's throughput on the same loopback (httpx's
  request/response models and URL parsing dominate there), so `userturn probe` uses it by default.

Both return an `HttpReply`, raise `TransportFailure` for connection-level problems and `TimeoutError` when an
attempt passes its deadline. The deadline is the client library's own (aiohttp's total timeout, whose timers
are coarse and cheap) for aiohttp, an `asyncio.timeout` for httpx: around every request, the latter measured
~30% of the whole probe run's throughput under uvloop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NamedTuple, Protocol

import aiohttp

if TYPE_CHECKING:  # httpx loads only when the httpx backend is used (it pulls in rich at import: ~0.1 s)
    import httpx


class HttpReply(NamedTuple):
    status: int
    content: bytes
    reason: str
    retry_after: str | None


class TransportFailure(Exception):
    """The request did not produce an HTTP response (refused, reset, closed mid-body...)."""


class Backend(Protocol):
    async def post(self, url: str, body: bytes) -> HttpReply: ...

    async def get(self, url: str) -> HttpReply: ...

    async def aclose(self) -> None: ...


def _describe(exc: BaseException) -> str:
    detail = str(exc).strip()
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


class HttpxBackend:
    """httpx API (respx-mockable) over an aiohttp transport."""

    def __init__(self, headers: dict[str, str], concurrency: int, connect_timeout: float,
                 request_timeout: float) -> None:
        import httpx
        from httpx_aiohttp import HttpxAiohttpClient

        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.client: httpx.AsyncClient = HttpxAiohttpClient(
            headers=headers, limits=limits, timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            trust_env=False,
        )
        self._deadline = request_timeout

    async def _send(self, method: str, url: str, body: bytes | None) -> HttpReply:
        import httpx

        try:
            async with asyncio.timeout(self._deadline):  # a whole-attempt deadline (httpx's are per phase)
                response = await self.client.request(method, url, content=body)
        except httpx.TimeoutException as exc:
            cause = exc.__cause__
            # httpx-aiohttp maps a dropped connection (ServerDisconnectedError) to ConnectTimeout: undo that.
            if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, aiohttp.ServerTimeoutError):
                raise TransportFailure(_describe(cause)) from None
            raise TimeoutError from None
        except httpx.TransportError as exc:
            raise TransportFailure(_describe(exc)) from None
        return HttpReply(response.status_code, response.content, response.reason_phrase,
                         response.headers.get("retry-after"))

    async def post(self, url: str, body: bytes) -> HttpReply:
        return await self._send("POST", url, body)

    async def get(self, url: str) -> HttpReply:
        return await self._send("GET", url, None)

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

    async def _send(self, method: str, url: str, body: bytes | None) -> HttpReply:
        try:
            async with self._get_session().request(method, url, data=body) as response:
                content = await response.read()
                return HttpReply(response.status, content, response.reason or "", response.headers.get("Retry-After"))
        except TimeoutError:  # incl. aiohttp.ServerTimeoutError
            raise TimeoutError from None
        except aiohttp.ClientError as exc:
            raise TransportFailure(_describe(exc)) from None

    async def post(self, url: str, body: bytes) -> HttpReply:
        return await self._send("POST", url, body)

    async def get(self, url: str) -> HttpReply:
        return await self._send("GET", url, None)

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
