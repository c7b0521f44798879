"""The one HTTP client of userturn (probe, chat mode, judges): `httpx.AsyncClient` over aiohttp (`httpx-aiohttp`).

Proxies: `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` / `NO_PROXY`, or `--proxy URL` for every URL (its credentials go
to the proxy only and are scrubbed from messages). TLS: `SSL_CERT_FILE` / `SSL_CERT_DIR`, or `--ca-bundle FILE`.
Response heads are limited by aiohttp; bodies by the caller's cap (`send`). `Network` holds the process's choices,
set once from the command line (`configure`); every client made afterwards uses it.
"""

from __future__ import annotations

import os
import ssl
import urllib.parse
import urllib.request
from typing import Any, NamedTuple

import aiohttp
import httpx
from aiohttp.http_exceptions import ContentEncodingError, TransferEncodingError
from pydantic import BaseModel

from userturn.client.http.redact import register_secret
from userturn.core.errors import AttemptKind, UserError

MAX_DETAIL = 300
SOCKS_SCHEMES = ("socks4", "socks4a", "socks5", "socks5h", "socks")
NO_SOCKS = "userturn speaks to http:// and https:// proxies only, not SOCKS; use an HTTP proxy (--proxy http://HOST:PORT)"


class Network(BaseModel):
    """How this process reaches endpoints: set from `--proxy`, `--ca-bundle`, `--no-model-check`."""

    proxy: str | None = None  # wins over HTTPS_PROXY / HTTP_PROXY / NO_PROXY
    ca_bundle: str | None = None  # wins over SSL_CERT_FILE / SSL_CERT_DIR
    check_model: bool = True  # the served model list must name the model (client.http.endpoint.Endpoint.check)


NETWORK = Network()


def configure(*, proxy: str | None = None, ca_bundle: str | None = None, check_model: bool = True) -> None:
    """Set the process's `Network` (the CLI calls this once); UserError with one line for a bad value."""
    if proxy is not None:
        parts = urllib.parse.urlsplit(proxy)
        if parts.scheme in SOCKS_SCHEMES:
            raise UserError(f"--proxy {without_credentials(proxy)}: {NO_SOCKS}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"--proxy {without_credentials(proxy)}: expected http://HOST:PORT (or https://)")
        register_secret(parts.password, "proxy password")
    if ca_bundle is not None:
        ssl_context(ca_bundle)  # a missing or unreadable bundle stops here, before anything is sent
    global NETWORK
    NETWORK = Network(proxy=proxy, ca_bundle=ca_bundle, check_model=check_model)


def check_environment_proxy(url: str) -> None:
    """UserError (one line, the proxy shown without credentials) when the environment's proxy for `url` (as httpx
    picks it: HTTPS_PROXY / HTTP_PROXY, else ALL_PROXY, unless NO_PROXY names the host; none with --proxy) is not
    an http(s):// one: httpx would speak HTTP to a SOCKS proxy."""
    if NETWORK.proxy is not None:
        return
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    key = next((k for k in (parts.scheme, "all") if proxies.get(k)), None)
    if key is None or urllib.request.proxy_bypass(parts.hostname or ""):  # NO_PROXY
        return
    proxy = proxies[key]
    if "://" not in proxy or proxy.split("://", 1)[0].lower() in ("http", "https"):  # httpx: no scheme is http://
        return
    name = next((n for n in (f"{key}_proxy", f"{key.upper()}_PROXY") if os.environ.get(n)), f"{key.upper()}_PROXY")
    raise UserError(f"${name} is {without_credentials(proxy)}: {NO_SOCKS} (or NO_PROXY for {parts.hostname})")


def without_credentials(url: str) -> str:
    """`url` without its `user:password@`, to be shown."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def ssl_context(ca_bundle: str) -> ssl.SSLContext:
    """A verifying TLS context trusting the certificates of `ca_bundle` (a PEM file or a directory)."""
    try:
        if os.path.isdir(ca_bundle):
            return ssl.create_default_context(capath=ca_bundle)
        return ssl.create_default_context(cafile=ca_bundle)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"--ca-bundle {ca_bundle}: cannot load certificates ({describe(exc)})") from None


class HttpReply(NamedTuple):
    status: int
    content: bytes
    reason: str
    retry_after: str | None


class ResponseTooLarge(Exception):
    """The response body is over the caller's limit (`declared`: its Content-Length, when it sent one)."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        super().__init__(f"over {limit} bytes" + (f" (Content-Length {declared})" if declared is not None else ""))


def make_client(*, headers: dict[str, str], concurrency: int, connect_timeout: float, request_timeout: float,
                transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """The production client (aiohttp underneath), or one over `transport` (tests: `httpx.MockTransport`)."""
    from httpx_aiohttp import HttpxAiohttpClient

    network = NETWORK
    verify: ssl.SSLContext | bool = ssl_context(network.ca_bundle) if network.ca_bundle else True
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return HttpxAiohttpClient(
        headers=headers, limits=limits, timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
        trust_env=True, proxy=network.proxy, verify=verify, follow_redirects=True, transport=transport,
    )


async def send(client: httpx.AsyncClient, method: str, url: str | httpx.URL, body: bytes | None,
               limit: int) -> HttpReply:
    """One request, its (decoded) body read no further than `limit` bytes (httpx limits no body size). Raises what
    the libraries raise (see `classify`), and ResponseTooLarge as soon as the body passes `limit`."""
    response = await client.send(client.build_request(method, url, content=body), stream=True)
    try:
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ResponseTooLarge(limit, int(declared))
        parts: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise ResponseTooLarge(limit)
            parts.append(chunk)
        content = b"".join(parts)
    finally:
        await response.aclose()
    return HttpReply(response.status_code, content, response.reason_phrase, response.headers.get("retry-after"))


TRANSPORT_ERRORS = (httpx.HTTPError, aiohttp.ClientError, TimeoutError)


def classify(exc: BaseException) -> AttemptKind:
    """What an attempt that raised `exc` (one of TRANSPORT_ERRORS) got, by exception type. httpx-aiohttp maps some
    aiohttp errors loosely (a dropped connection becomes ConnectTimeout) and lets others through unmapped (a
    malformed header): the aiohttp exception underneath decides when there is one."""
    cause = exc if isinstance(exc, aiohttp.ClientError) else exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return _aiohttp_kind(cause)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.ProxyError):
        return "connect"
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError | httpx.TooManyRedirects):
        return "malformed"
    return "dropped"


def _aiohttp_kind(exc: aiohttp.ClientError) -> AttemptKind:
    # no connection to the endpoint: refused, DNS, connect timeout, or a proxy that could not open the tunnel
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError | aiohttp.ClientHttpProxyError):
        return "connect"
    if isinstance(exc, TimeoutError):  # aiohttp's read timeouts
        return "timeout"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "malformed" if isinstance(exc.__cause__, ContentEncodingError | TransferEncodingError) else "dropped"
    if type(exc) is aiohttp.ClientResponseError:  # what aiohttp's parser raises for a bad status line or header
        return "malformed"
    return "dropped"


def describe(exc: BaseException) -> str:
    """`Type: message` on one line, shortened (parser errors span several lines); the aiohttp cause's when there
    is one (httpx-aiohttp repeats its text under an httpx class)."""
    cause = exc.__cause__ if isinstance(exc.__cause__, aiohttp.ClientError) else exc
    message: Any = cause.message if isinstance(cause, aiohttp.ClientResponseError) else cause
    detail = " ".join(str(message).split())
    text = f"{type(cause).__name__}: {detail}" if detail else type(cause).__name__
    return text[:MAX_DETAIL]
