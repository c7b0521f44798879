"""An in-process loopback server that answers with exact bytes, for responses no HTTP library will produce.

    async with RawHttpServer([b"HTTP/1.1 200 OK\\r\\nBad Header\\r\\n\\r\\n"]) as server:
        ...  # the first request gets the scripted bytes, later ones `GOOD_RESPONSE`; server.requests counts them

Each connection serves one request (the request is read whole: head, then a Content-Length body), gets the next
scripted response (or the default) and is closed, so a response without a length ends where the bytes end.
"""

from __future__ import annotations

import asyncio
import json
from typing import Self

GOOD_BODY = {"id": "cmpl-ok", "object": "text_completion", "choices": [
    {"index": 0, "text": "fine", "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}]}


def http_response(body: bytes, status: str = "200 OK", headers: dict[str, str] | None = None) -> bytes:
    """A well-formed response with a Content-Length (unless `headers` sets Transfer-Encoding)."""
    fields = {"Content-Type": "application/json", "Connection": "close", **(headers or {})}
    if "Transfer-Encoding" not in fields:
        fields.setdefault("Content-Length", str(len(body)))
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return f"HTTP/1.1 {status}\r\n{head}\r\n".encode() + body


GOOD_RESPONSE = http_response(json.dumps(GOOD_BODY).encode())


class LocalServer:
    """An asyncio TCP server on a free port of 127.0.0.1 whose connections `_handle` serves (`async with` runs it).

    Subclasses count their open connections in `open_now`: leaving waits (up to a second) for them to close, since
    Python 3.11's `wait_closed` does not wait for handlers.
    """

    _server: asyncio.Server | None = None
    port: int = 0
    open_now: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for _ in range(100):
            if not self.open_now:
                break
            await asyncio.sleep(0.01)
        await self._server.wait_closed()


class RawHttpServer(LocalServer):
    """Serves `script[i]` to the i-th request and `default` after the script runs out."""

    def __init__(self, script: list[bytes], default: bytes = GOOD_RESPONSE) -> None:
        self.script = list(script)
        self.default = default
        self.requests = 0
        self.received: list[bytes] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            self.received.append(head + await reader.readexactly(length))
            index = self.requests
            self.requests += 1
            writer.write(self.script[index] if index < len(self.script) else self.default)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
