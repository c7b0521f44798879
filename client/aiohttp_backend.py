"""The aiohttp backend: a bare `aiohttp.ClientSession` (follows redirects), and the one mapping of aiohttp's errors
onto the backends' common failures (client.http_backends). The deadline is aiohttp's own total timeout, whose
timers are coarse and cheap."""

from __future__ import annotations

import aiohttp
from aiohttp.http_exceptions import ContentEncodingError, TransferEncodingError
from userturn.client.http_backends import HttpReply, ResponseTooLarge, TransportFailure, describe, read_capped


def describe_error(exc: BaseException) -> str:
    """`Type: message` on one line (a ClientResponseError's message, not its repr'd form)."""
    return describe(exc, exc.message if isinstance(exc, aiohttp.ClientResponseError) else None)


def failure_from_aiohttp(exc: BaseException) -> TransportFailure | TimeoutError:
    """The backend-neutral failure for an aiohttp exception (or a bare TimeoutError)."""
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
        return TransportFailure(describe_error(exc), "connect")
    if isinstance(exc, TimeoutError):  # incl. aiohttp's read timeouts
        return TimeoutError()
    if isinstance(exc, aiohttp.ClientPayloadError):
        bad_encoding = isinstance(exc.__cause__, ContentEncodingError | TransferEncodingError)
        return TransportFailure(describe_error(exc), "malformed" if bad_encoding else "dropped")
    if type(exc) is aiohttp.ClientResponseError:  # what aiohttp's parser raises for a bad status line or header
        return TransportFailure(describe_error(exc), "malformed")
    return TransportFailure(describe_error(exc), "dropped")


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
