"""An in-process HTTP/1.1 server that keeps connections open, for the httptools backend's pooling tests.

    async with KeepAliveServer() as server:
        ...  # every request gets `respond(request)` (default: GOOD_RESPONSE without `Connection: close`)

It counts connections and records every request it read (head and body). `respond` returns the bytes to send, or
None to close the connection without a reply (a reply with `Connection: close` closes it after sending); `hold`
makes the server wait that long before answering.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field

GOOD_BODY = json.dumps({"choices": [{"index": 0, "text": "fine", "finish_reason": "stop"}]}).encode()


def keepalive_response(body: bytes = GOOD_BODY, status: str = "200 OK", headers: dict[str, str] | None = None,
                       version: str = "HTTP/1.1") -> bytes:
    """A response that leaves the connection open (a Content-Length unless `headers` sets Transfer-Encoding or
    `Content-Length` to None)."""
    fields: dict[str, str | None] = {"Content-Type": "application/json", **(headers or {})}
    if "Transfer-Encoding" not in fields:
        fields.setdefault("Content-Length", str(len(body)))
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items() if v is not None)
    return f"{version} {status}\r\n{head}\r\n".encode() + body


@dataclass
class Request:
    connection: int
    head: bytes
    body: bytes

    @property
    def line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode()

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode()
        return None


@dataclass
class KeepAliveServer:
    respond: Callable[[Request], bytes | None] = lambda _request: keepalive_response()
    hold: float = 0.0
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request = Request(number, head, b"")
                length = int(request.header("content-length") or 0)
                request.body = await reader.readexactly(length)
                self.requests.append(request)
                if self.hold:
                    await asyncio.sleep(self.hold)
                reply = self.respond(request)
                if reply is None:
                    return
                writer.write(reply)
                await writer.drain()
                if b"\r\nconnection: close\r\n" in reply.split(b"\r\n\r\n", 1)[0].lower() + b"\r\n":
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()

    async def __aenter__(self) -> KeepAliveServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for _ in range(100):  # let handlers see their clients go (Python 3.11's wait_closed does not wait for them)
            if not self.open_now:
                break
            await asyncio.sleep(0.01)
        await self._server.wait_closed()
