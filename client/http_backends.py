"""How request bytes move: three backends under one interface; `Endpoint` puts the retry policy and error classes
on top of any of them. Each loads its library only when chosen (a probe on the default backend never imports
aiohttp or httpx: ~0.1 s each at start-up).

- `httptools` (client.httptools_backend): HTTP/1.1 keep-alive connections on asyncio protocols, parsed by
  httptools. What `userturn probe` uses: ~35-50 µs of client CPU per request on a 2-core loopback, against
  ~100-130 µs for aiohttp's ClientSession (`benchmarks/bench_probe.py --http-layer`). No proxies.
- `aiohttp` (client.aiohttp_backend): a bare `aiohttp.ClientSession`; follows redirects.
- `httpx` (client.httpx_backend): `httpx.AsyncClient` over an aiohttp transport (`httpx-aiohttp`). The httpx API, so
  respx can mock it (`respx.mock(using="httpx")`); ~1,000 req/s on a 2-core loopback.

All return an `HttpReply` and fail the same way, whatever library raised what (`failure_from_aiohttp` is the
mapping of aiohttp's errors; the httpx backend's aiohttp transport errors go through it too):

- `TransportFailure` with `kind` "connect" (no connection could be opened: refused, DNS, connect timeout),
  "dropped" (the connection broke: reset, closed before or during the body) or "malformed" (the bytes are not a
  valid HTTP response: bad status line, header, chunking or content encoding);
- `TimeoutError` when an attempt passes its deadline;
- `ResponseTooLarge` when the body exceeds the caller's `limit` (read no further than the limit: a declared
  Content-Length over it is refused before reading, an undeclared body is cut as soon as it passes it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, NamedTuple, Protocol

FailureKind = Literal["connect", "dropped", "malformed"]
MAX_DETAIL = 300


class HttpReply(NamedTuple):
    status: int
    content: bytes
    reason: str
    retry_after: str | None
    location: str | None = None  # of a 3xx the backend stopped following (httptools: past ten redirects)


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


def describe(exc: BaseException, message: object | None = None) -> str:
    """`Type: message` on one line, shortened (parser errors span several lines)."""
    detail = " ".join(str(exc if message is None else message).split())
    text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return text[:MAX_DETAIL]


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


BackendName = Literal["httptools", "aiohttp", "httpx"]


def make_backend(name: str, *, headers: dict[str, str], concurrency: int, connect_timeout: float,
                 request_timeout: float) -> Backend:
    """The backend called `name`, its library imported now."""
    if name == "httptools":
        from userturn.client.httptools_backend import HttptoolsBackend

        return HttptoolsBackend(headers, concurrency, connect_timeout, request_timeout)
    if name == "aiohttp":
        from userturn.client.aiohttp_backend import AiohttpBackend

        return AiohttpBackend(headers, concurrency, connect_timeout, request_timeout)
    if name == "httpx":
        from userturn.client.httpx_backend import HttpxBackend

        return HttpxBackend(headers, concurrency, connect_timeout, request_timeout)
    raise ValueError(f"unknown HTTP backend {name!r} (httptools, aiohttp or httpx)")
