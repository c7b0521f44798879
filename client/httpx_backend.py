"""The httpx backend: `httpx.AsyncClient` over an aiohttp transport (`httpx-aiohttp`), so respx can mock it.

Its deadline is an `asyncio.timeout` around each attempt (httpx's own are per phase); its failures map onto the
backends' common ones (client.http_backends), an aiohttp cause first (client.aiohttp_backend).
"""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
from userturn.client.aiohttp_backend import describe_error, failure_from_aiohttp
from userturn.client.http_backends import HttpReply, ResponseTooLarge, TransportFailure, read_capped


def failure_from_httpx(exc: BaseException) -> TransportFailure | TimeoutError:
    """The same mapping for what the httpx API raises: an aiohttp cause decides; httpx's own classes otherwise."""
    cause = exc if isinstance(exc, aiohttp.ClientError) else exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return failure_from_aiohttp(cause)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return TransportFailure(describe_error(exc), "connect")
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return TimeoutError()
    if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError):
        return TransportFailure(describe_error(exc), "malformed")
    return TransportFailure(describe_error(exc), "dropped")


class HttpxBackend:
    """httpx API (respx-mockable) over an aiohttp transport."""

    def __init__(self, headers: dict[str, str], concurrency: int, connect_timeout: float,
                 request_timeout: float) -> None:
        from httpx_aiohttp import HttpxAiohttpClient

        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.client: httpx.AsyncClient = HttpxAiohttpClient(
            headers=headers, limits=limits, timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            trust_env=False, follow_redirects=True,  # as aiohttp does
        )
        self._deadline = request_timeout

    async def _send(self, method: str, url: str, body: bytes | None, limit: int) -> HttpReply:
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
