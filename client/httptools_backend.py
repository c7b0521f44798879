"""The probe's HTTP backend: HTTP/1.1 keep-alive connections on asyncio protocols, replies parsed by httptools.

Why not aiohttp: on a 2-core loopback, aiohttp's `ClientSession.request` costs ~100-130 µs of client CPU per
request (request and response objects, header multidicts, URL handling, timers, tracing hooks); a protocol per
connection fed to httptools (the llhttp parser uvicorn uses) costs ~35-50 µs for the same request and reply
(`benchmarks/bench_probe.py --http-layer`). At one sample per item that difference is most of what separates the
probe from a bare HTTP loop. Parsing (status line, headers, Content-Length, chunked bodies, keep-alive rules) is
httptools'; this module only frames requests, pools connections and maps failures.

Scope, and what it leaves out:

- HTTP/1.1 over TCP or TLS (`ssl.create_default_context()`, SNI, certificate checks on), one request at a time
  per connection, at most `concurrency` connections open; idle connections are reused;
- bodies with Content-Length, chunked, or read until the server closes (HTTP/1.0); `Accept-Encoding: identity` is
  sent, and a gzip/deflate body a server compresses anyway is inflated (its inflated bytes count against the cap);
- a request whose *reused* connection closes before any byte of the reply (the server dropped an idle
  connection) is sent once more on a new connection, as aiohttp and urllib3 do;
- redirects followed as aiohttp follows them, up to ten (past that the 3xx is returned with its Location, and
  `Endpoint` says where it points); informational 1xx replies before the real one skipped;
- no proxies (the other backends run with `trust_env=False` too), no cookies, no HTTP/2.

Failures are the backends' common ones (client.http_backends): `TransportFailure` "connect" / "dropped" /
"malformed", `TimeoutError` past the per-attempt deadline (connect included), `ResponseTooLarge` past the cap.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import sys
import zlib
from collections.abc import Coroutine
from typing import Any, cast
from urllib.parse import urljoin, urlsplit

import httptools
from userturn.client.http_backends import HttpReply, ResponseTooLarge, TransportFailure, describe

Origin = tuple[str, str, int]  # scheme, host, port
USER_AGENT = f"userturn (Python {sys.version_info[0]}.{sys.version_info[1]}; httptools {httptools.__version__})"
DEFAULT_PORTS = {"http": 80, "https": 443}
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10  # aiohttp's default


class _StaleConnection(Exception):
    """A reused keep-alive connection closed before any byte of the reply: safe to send again on a new one."""


class Target:
    """A URL split once: its origin and the request head for each method, up to the Content-Length value."""

    __slots__ = ("heads", "origin")

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS or not parts.hostname:
            raise TransportFailure(f"unsupported URL {url!r} (http:// or https:// with a host)", "connect")
        try:
            port = parts.port or DEFAULT_PORTS[scheme]
        except ValueError:
            raise TransportFailure(f"invalid port in URL {url!r}", "connect") from None
        host = parts.hostname
        self.origin: Origin = (scheme, host, port)
        shown = f"[{host}]" if ":" in host else host
        if port != DEFAULT_PORTS[scheme]:
            shown += f":{port}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"Host: {shown}", f"User-Agent: {USER_AGENT}", "Accept-Encoding: identity"]
        lines += [f"{name}: {value}" for name, value in headers.items()
                  if name.lower() not in ("host", "user-agent", "accept-encoding", "content-length")]
        fields = "\r\n".join(lines)
        self.heads = {method: f"{method} {path} HTTP/1.1\r\n{fields}\r\n".encode("latin-1")
                      for method in ("GET", "POST")}


class _Connection(asyncio.Protocol):
    """One keep-alive connection: sends one request at a time and parses its reply with httptools."""

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.waiter: asyncio.Future[HttpReply] | None = None
        self.limit = 0
        self._reset()

    def _reset(self) -> None:
        self.received = False  # any byte of the current reply
        self.headers_done = False
        self.complete = False
        self.reason = b""
        self.length: int | None = None
        self.chunked = False
        self.encoding: str | None = None
        self.retry_after: str | None = None
        self.location: str | None = None
        self.parts: list[bytes] = []
        self.size = 0
        self.inflater: Any = None

    # --- sending ------------------------------------------------------------------------------------------------
    def send(self, request: bytes, limit: int) -> asyncio.Future[HttpReply]:
        self._reset()
        self.limit = limit
        self.waiter = waiter = self.loop.create_future()
        assert self.transport is not None
        self.transport.write(request)
        return waiter

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def time_out(self) -> None:
        self._fail(TimeoutError())

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.abort()

    # --- asyncio.Protocol ---------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses, hence no isinstance

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.abort()
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # raised by a callback below: ours says what went wrong
            cause = exc.__context__
            self._fail(cause if isinstance(cause, ResponseTooLarge | TransportFailure)
                       else TransportFailure(describe(exc), "malformed"))
        except httptools.HttpParserUpgrade:
            self._fail(TransportFailure("unexpected protocol upgrade", "malformed"))
        except httptools.HttpParserError as exc:
            self._fail(TransportFailure(describe(exc), "malformed"))

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost decides what the reply was

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter, self.waiter = self.waiter, None
        if waiter is None or waiter.done():
            return
        if self.headers_done and self.length is None and not self.chunked:
            try:  # a body delimited by the close (HTTP/1.0 style): it ends here
                waiter.set_result(self._reply())
            except (ResponseTooLarge, TransportFailure) as error:
                waiter.set_exception(error)
            return
        if not self.received and self.reused:
            waiter.set_exception(_StaleConnection())
            return
        reason = describe(exc) if exc is not None else "server closed the connection"
        if self.received:
            reason += " (reply incomplete)"
        waiter.set_exception(TransportFailure(reason, "dropped"))

    # --- httptools callbacks ------------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.waiter is None:  # a second reply to one request: the connection cannot be trusted any more
            raise TransportFailure("reply nobody asked for", "malformed")

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key == b"content-length":
            self.length = int(value) if value.strip().isdigit() else None
        elif key == b"transfer-encoding":
            self.chunked = b"chunked" in value.lower()
        elif key == b"content-encoding":
            coding = value.strip().lower().decode("latin-1")
            self.encoding = None if coding in ("", "identity") else coding
        elif key == b"retry-after":
            self.retry_after = value.decode("latin-1")
        elif key == b"location":
            self.location = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.headers_done = True
        if self.length is not None and self.length > self.limit:
            raise ResponseTooLarge(self.limit, self.length)
        if self.encoding is not None:
            if self.encoding not in ("gzip", "x-gzip", "deflate"):
                raise TransportFailure(f"unsupported Content-Encoding {self.encoding!r}", "malformed")
            self.inflater = zlib.decompressobj(wbits=47)  # gzip or zlib, detected from the header

    def on_body(self, chunk: bytes) -> None:
        if self.inflater is not None:
            try:
                chunk = self.inflater.decompress(chunk, self.limit - self.size + 1)
            except zlib.error as exc:
                raise TransportFailure(f"invalid {self.encoding} body: {exc}", "malformed") from None
        self.size += len(chunk)
        if self.size > self.limit:
            raise ResponseTooLarge(self.limit)
        self.parts.append(chunk)

    def on_message_complete(self) -> None:
        if 100 <= self.parser.get_status_code() < 200 and self.waiter is not None:  # 100 Continue, 103 Early Hints:
            self._reset()  # informational; the real reply follows on the same connection
            return
        waiter, self.waiter = self.waiter, None
        self.complete = True
        if waiter is None or waiter.done():
            return
        try:
            reply = self._reply()
        except (ResponseTooLarge, TransportFailure) as exc:
            waiter.set_exception(exc)
            self.abort()
            return
        if not self.parser.should_keep_alive():
            self.closed = True
            assert self.transport is not None
            self.transport.close()
        waiter.set_result(reply)

    def _reply(self) -> HttpReply:
        if self.inflater is not None:
            rest = self.inflater.flush()
            self.size += len(rest)
            if self.size > self.limit:
                raise ResponseTooLarge(self.limit)
            self.parts.append(rest)
        parts = self.parts
        content = parts[0] if len(parts) == 1 else b"".join(parts)
        return HttpReply(self.parser.get_status_code(), content, self.reason.decode("latin-1"), self.retry_after,
                         self.location)


class HttptoolsBackend:
    """A pool of keep-alive `_Connection`s per origin, at most `concurrency` open at once."""

    def __init__(self, headers: dict[str, str], concurrency: int, connect_timeout: float,
                 request_timeout: float) -> None:
        self._headers = headers
        self._limit = concurrency
        self._connect_timeout = connect_timeout
        self._deadline = request_timeout
        self._targets: dict[str, Target] = {}
        self._idle: dict[Origin, list[_Connection]] = collections.defaultdict(list)
        self._open: set[_Connection] = set()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._ssl: ssl.SSLContext | None = None
        # Requests in flight: {connection: its deadline}. One timer (`_sweep`) times out the ones past their deadline
        # instead of a timer per request (a libuv timer started and cancelled per request costs ~2-3 us).
        self._in_flight: dict[_Connection, float] = {}
        self._sweep_at: asyncio.TimerHandle | None = None

    def _target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) > 1024:
                self._targets.clear()
            target = self._targets[url] = Target(url, self._headers)
        return target

    def post(self, url: str, body: bytes, limit: int) -> Coroutine[Any, Any, HttpReply]:
        return self._send("POST", url, body, limit)  # the coroutine itself: one frame less per request

    def get(self, url: str, limit: int) -> Coroutine[Any, Any, HttpReply]:
        return self._send("GET", url, None, limit)

    async def _send(self, method: str, url: str, body: bytes | None, limit: int) -> HttpReply:
        """One attempt, redirects included (as aiohttp follows them: 307/308 keep the method and body, 301/302/303
        turn a POST into a GET; the Authorization header is not sent to another origin); the deadline covers all."""
        deadline = asyncio.get_running_loop().time() + self._deadline
        target = self._target(url)
        first = target.origin
        for _ in range(MAX_REDIRECTS + 1):
            head = target.heads[method]
            request = head + b"\r\n" if body is None else \
                head + b"Content-Length: %d\r\n\r\n" % len(body) + body
            reply = await self._request(target, request, limit, deadline)
            if reply.status not in REDIRECTS or not reply.location:
                return reply
            url = urljoin(url, reply.location)
            if reply.status in (301, 302, 303) and method == "POST":
                method, body = "GET", None
            target = self._target(url)
            if target.origin != first:
                target = Target(url, {k: v for k, v in self._headers.items() if k.lower() != "authorization"})
        return reply  # still a redirect: Endpoint says where it points

    async def _request(self, target: Target, request: bytes, limit: int, deadline: float) -> HttpReply:
        for fresh in (False, True):
            conn = None if fresh else self._idle_connection(target.origin)
            if conn is None:
                conn = await self._acquire(target.origin, deadline, fresh)
            self._in_flight[conn] = deadline
            if self._sweep_at is None or deadline < self._sweep_at.when():  # (a redirect keeps its first deadline)
                if self._sweep_at is not None:
                    self._sweep_at.cancel()
                self._sweep_at = asyncio.get_running_loop().call_at(deadline, self._sweep)
            try:
                reply = await conn.send(request, limit)
            except _StaleConnection:
                continue
            except BaseException:  # failed, timed out or cancelled: the connection's state is unknown
                conn.abort()
                raise
            finally:
                self._in_flight.pop(conn, None)  # (gone when `_sweep` timed it out)
                self._release(conn)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover - a fresh connection is never stale

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        """An idle connection to `origin` still open, if any (the common case, without a coroutine)."""
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable():
                conn.reused = True
                return conn
            self._open.discard(conn)
        return None

    async def _acquire(self, origin: Origin, deadline: float, fresh: bool) -> _Connection:
        """An idle connection to `origin` (unless `fresh`), else a new one once fewer than `concurrency` are open."""
        while True:
            conn = None if fresh else self._idle_connection(origin)
            if conn is not None:
                return conn
            if len(self._open) < self._limit or self._close_an_idle_connection():
                return await self._connect(origin, deadline)
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except BaseException:
                waiter.cancel()
                raise

    def _close_an_idle_connection(self) -> bool:
        """Make room for a new connection by closing an idle one (of another origin, or of this one when a fresh
        connection is asked for); False when none is idle."""
        for pool in self._idle.values():
            while pool:
                conn = pool.pop()
                self._open.discard(conn)
                conn.abort()
                return True
        return False

    async def _connect(self, origin: Origin, deadline: float) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        conn = _Connection(loop, origin)
        self._open.add(conn)
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        try:
            async with asyncio.timeout_at(min(deadline, loop.time() + self._connect_timeout)):
                await loop.create_connection(lambda: conn, host, port, ssl=context,
                                             server_hostname=host if context else None)
        except TimeoutError:
            self._drop(conn)
            raise TransportFailure(f"could not connect to {host}:{port} within {self._connect_timeout:g}s",
                                   "connect") from None
        except OSError as exc:  # refused, unreachable, DNS (gaierror), TLS (SSLError)
            self._drop(conn)
            raise TransportFailure(f"cannot connect to {host}:{port}: {describe(exc)}", "connect") from None
        except BaseException:
            self._drop(conn)
            raise
        sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _drop(self, conn: _Connection) -> None:
        self._open.discard(conn)
        self._wake()

    def _sweep(self) -> None:
        """Time out the requests past their deadline; run again at the earliest deadline left (a request that starts
        with an earlier one moves the timer), so each request times out at its own deadline, as with a timer of its
        own."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn in [c for c, deadline in self._in_flight.items() if deadline <= now]:
            del self._in_flight[conn]
            conn.time_out()
        self._sweep_at = loop.call_at(min(self._in_flight.values()), self._sweep) if self._in_flight else None

    def _release(self, conn: _Connection) -> None:
        if conn.usable() and conn.complete and conn.waiter is None:
            self._idle[conn.origin].append(conn)
        else:
            conn.abort()
            self._open.discard(conn)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def aclose(self) -> None:
        if self._sweep_at is not None:
            self._sweep_at.cancel()
            self._sweep_at = None
        for conn in list(self._open):
            conn._fail(TransportFailure("the client closed the connection", "dropped"))
        self._open.clear()
        self._idle.clear()
        self._targets.clear()
