"""Base URLs as people paste them: split for request paths, refused when they end in a request path, the likely
base after a 404, and hints for a preflight refusal."""

from __future__ import annotations

import re
import urllib.parse

import aiohttp

from userturn.client.http import http_client
from userturn.core.errors import UserError

PREFLIGHT_HINTS = {  # after the server's message, for a 4xx on GET /models
    407: " (the proxy wants credentials: http://USER:PASSWORD@HOST:PORT in --proxy or HTTPS_PROXY)",
    413: " (is the API key's variable holding something else?)",
    431: " (is the API key's variable holding something else?)",
}
REQUEST_PATHS = ("/chat/completions", "/completions")  # what userturn appends to a base URL


def split_base_url(base_url: str) -> tuple[str, str]:
    """(scheme://host/path without a trailing slash, "?query" or ""): a path is inserted between the two, so a
    query such as Azure's `?api-version=` stays at the end. UserError for URL credentials (never echoed)."""
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = base_url.rpartition("@")[2]  # whatever came before an "@" may be a password
        raise UserError(f"base URL {shown!r}: expected http(s)://HOST[:PORT]/PATH, e.g. http://127.0.0.1:30000/v1")
    if parts.username is not None or parts.password is not None:
        shown = http_client.without_credentials(base_url.strip())
        raise UserError(f"base URL {shown} carries credentials (user:password@), which userturn does not send: put "
                        "the API key in the variable --api-key-env names (sent as a Bearer token); a proxy's "
                        "credentials go in --proxy or HTTPS_PROXY")
    prefix = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    query = f"?{parts.query}" if parts.query else ""
    tail = next((p for p in REQUEST_PATHS if prefix.endswith(p)), None)
    if tail is not None:
        raise UserError(f"base URL {base_url.strip()} ends in {tail}, which userturn adds to every request itself: "
                        f"use {prefix.removesuffix(tail) + query} as the base URL")
    return prefix, query


def likely_base(prefix: str) -> str | None:
    """The base URL a 404 most likely meant: `prefix` + "/v1" when its path names no API version (a server's root,
    not an Azure deployment); None otherwise."""
    segments = urllib.parse.urlsplit(prefix).path.split("/")
    if "deployments" in segments or any(re.fullmatch(r"v\d+\w*", s) for s in segments):
        return None
    return f"{prefix}/v1"


def proxy_hint(exc: BaseException) -> str:
    """A hint for an error that is a proxy's 407 (it wants credentials), else ""."""
    cause = exc.__cause__ if isinstance(exc.__cause__, aiohttp.ClientHttpProxyError) else exc
    if isinstance(cause, aiohttp.ClientHttpProxyError) and cause.status == 407:
        return PREFLIGHT_HINTS[407]
    return ""
