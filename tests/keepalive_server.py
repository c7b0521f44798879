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

from raw_http_server import LocalServer

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
class KeepAliveServer(LocalServer):
    respond: Callable[[Request], bytes | None] = lambda _request: keepalive_response()
    hold: float = 0.0
    connections: int = 0
    most_open: int = 0
    requests: list[Request] = field(default_factory=list)

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
