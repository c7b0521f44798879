"""The httptools backend on real sockets: pooling, keep-alive rules, bodies, redirects, deadlines, TLS.

Malformed replies, caps and the failure classes shared with the other backends are in test_bad_responses.py and
test_endpoint.py (parametrized over all three backends); this file covers what only a hand-pooled client can get
wrong.
"""

from __future__ import annotations

import asyncio
import gzip
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from keepalive_server import GOOD_BODY, KeepAliveServer, Request, keepalive_response
from userturn.client.endpoint import Endpoint, EndpointConfig
from userturn.client.http_backends import HttpReply, TransportFailure
from userturn.client.httptools_backend import HttptoolsBackend

from userturn.errors import EndpointError

CAP = 1 << 20


@asynccontextmanager
async def backend(concurrency: int = 4, timeout: float = 10.0,
                  headers: dict[str, str] | None = None) -> AsyncIterator[HttptoolsBackend]:
    client = HttptoolsBackend(headers or {"content-type": "application/json"}, concurrency, 5.0, timeout)
    try:
        yield client
    finally:
        await client.aclose()


async def post(client: HttptoolsBackend, server: KeepAliveServer, body: bytes = b'{"prompt":"p"}',
               path: str = "/completions") -> HttpReply:
    return await client.post(server.base_url + path, body, CAP)


async def test_requests_reuse_one_connection_and_send_a_complete_head() -> None:
    async with KeepAliveServer() as server:
        async with backend(headers={"content-type": "application/json", "authorization": "Bearer k"}) as client:
            replies = [await post(client, server, b'{"n":%d}' % i) for i in range(20)]
        assert [r.status for r in replies] == [200] * 20 and replies[0].content == GOOD_BODY
        assert server.connections == 1
        first = server.requests[0]
        assert first.line == "POST /v1/completions HTTP/1.1"
        assert first.header("host") == f"127.0.0.1:{server.port}"
        assert first.header("content-length") == "7" and first.body == b'{"n":0}'
        assert first.header("authorization") == "Bearer k" and first.header("accept-encoding") == "identity"
        assert (first.header("user-agent") or "").startswith("userturn (Python 3.")


async def test_concurrent_requests_open_at_most_concurrency_connections() -> None:
    async with KeepAliveServer(hold=0.02) as server:
        async with backend(concurrency=3) as client:
            replies = await asyncio.gather(*(post(client, server) for _ in range(30)))
        assert all(r.status == 200 for r in replies)
        assert server.most_open <= 3 and server.connections == 3
        assert len(server.requests) == 30


async def test_a_reused_connection_the_server_dropped_is_retried_once_on_a_new_one() -> None:
    def respond(request: Request) -> bytes | None:
        return None if len(server.requests) == 2 else keepalive_response()  # the 2nd request: close, no reply

    server = KeepAliveServer(respond)
    async with server, backend() as client:
        assert (await post(client, server)).status == 200
        reply = await post(client, server)  # on the reused connection, which closes: sent again on a new one
        assert reply.status == 200 and reply.content == GOOD_BODY
        assert [r.connection for r in server.requests] == [1, 1, 2]


async def test_a_new_connection_dropped_before_any_reply_is_a_dropped_failure() -> None:
    async with KeepAliveServer(lambda _r: None) as server, backend() as client:
        with pytest.raises(TransportFailure) as info:
            await post(client, server)
    assert info.value.kind == "dropped" and info.value.detail == "server closed the connection"
    assert len(server.requests) == 1  # not sent again: the connection was new


async def test_a_reply_cut_mid_body_is_dropped() -> None:
    cut = keepalive_response(headers={"Content-Length": "100", "Connection": "close"})[:-10]
    async with KeepAliveServer(lambda _r: cut) as server, backend() as client:
        with pytest.raises(TransportFailure) as info:
            await post(client, server)
    assert info.value.kind == "dropped" and info.value.detail == "server closed the connection (reply incomplete)"


async def test_connection_close_and_http_1_0_are_not_reused() -> None:
    replies = iter([keepalive_response(headers={"Connection": "close"}), keepalive_response(version="HTTP/1.0"),
                    keepalive_response()])
    async with KeepAliveServer(lambda _r: next(replies)) as server, backend() as client:
        for _ in range(3):
            assert (await post(client, server)).status == 200
        assert [r.connection for r in server.requests] == [1, 2, 3]


async def test_a_body_without_length_ends_when_the_server_closes() -> None:
    def respond(_request: Request) -> bytes | None:
        return keepalive_response(headers={"Content-Length": None, "Connection": "close"}, version="HTTP/1.0")

    async with KeepAliveServer(respond) as server, backend() as client:
        reply = await asyncio.wait_for(post(client, server), 2)
    assert reply.content == GOOD_BODY


async def test_chunked_and_gzip_bodies_are_assembled_and_inflated() -> None:
    chunked = keepalive_response(b"5\r\n" + GOOD_BODY[:5] + b"\r\n" + b"%x\r\n" % (len(GOOD_BODY) - 5)
                                 + GOOD_BODY[5:] + b"\r\n0\r\n\r\n", headers={"Transfer-Encoding": "chunked"})
    zipped = keepalive_response(gzip.compress(GOOD_BODY), headers={"Content-Encoding": "gzip"})
    replies = iter([chunked, zipped])
    async with KeepAliveServer(lambda _r: next(replies)) as server, backend() as client:
        assert (await post(client, server)).content == GOOD_BODY
        assert (await post(client, server)).content == GOOD_BODY
        assert server.connections == 1


async def test_informational_replies_before_the_real_one_are_skipped() -> None:
    hints = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    async with KeepAliveServer(lambda _r: hints + keepalive_response()) as server, backend() as client:
        replies = [await post(client, server) for _ in range(2)]
        assert [(r.status, r.content) for r in replies] == [(200, GOOD_BODY)] * 2 and server.connections == 1


async def test_an_unsupported_content_encoding_is_malformed() -> None:
    reply = keepalive_response(b"\x0b\x02\x80", headers={"Content-Encoding": "br"})
    async with KeepAliveServer(lambda _r: reply) as server, backend() as client:
        with pytest.raises(TransportFailure) as info:
            await post(client, server)
    assert info.value.kind == "malformed" and info.value.detail == "unsupported Content-Encoding 'br'"


async def test_bytes_nobody_asked_for_retire_the_connection() -> None:
    extra = keepalive_response() + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    replies = iter([extra, keepalive_response()])
    async with KeepAliveServer(lambda _r: next(replies)) as server, backend() as client:
        assert (await post(client, server)).status == 200
        await asyncio.sleep(0.05)
        assert (await post(client, server)).status == 200
        assert [r.connection for r in server.requests] == [1, 2]


async def test_the_deadline_covers_the_whole_attempt_and_frees_the_slot() -> None:
    async with KeepAliveServer(hold=5) as server, backend(concurrency=1, timeout=0.3) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await post(client, server)
        assert loop.time() - started < 2
        server.hold = 0
        assert (await post(client, server)).status == 200  # the one slot is free again


async def test_each_request_times_out_at_its_own_deadline() -> None:
    async with KeepAliveServer(hold=5) as server, backend(concurrency=4, timeout=0.4) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        ended: dict[str, float] = {}

        async def timed(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            with pytest.raises(TimeoutError):
                await post(client, server)
            ended[name] = loop.time() - started

        await asyncio.gather(timed("first", 0.0), timed("second", 0.3), timed("third", 0.3))
        assert 0.4 <= ended["first"] < 1.2
        assert 0.7 <= ended["second"] < 1.5 and 0.7 <= ended["third"] < 1.5  # not cut at the first one's deadline
        assert not client._in_flight
        server.hold = 0
        assert (await post(client, server)).status == 200


async def test_a_cancelled_request_frees_its_slot() -> None:
    async with KeepAliveServer(hold=5) as server, backend(concurrency=1) as client:
        task = asyncio.create_task(post(client, server))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        server.hold = 0
        assert (await asyncio.wait_for(post(client, server), 2)).status == 200


async def test_redirects_follow_aiohttp_rules_and_keep_the_key_to_the_origin() -> None:
    async with KeepAliveServer() as other:
        def respond(request: Request) -> bytes | None:
            if request.line.startswith("POST /v1/completions"):
                return keepalive_response(b"", "307 Temporary Redirect", {"Location": "/v1/moved"})
            if request.line.startswith("POST /v1/moved"):
                return keepalive_response(b"", "303 See Other", {"Location": f"{other.base_url}/elsewhere"})
            return keepalive_response()

        async with KeepAliveServer(respond) as server, backend(headers={"authorization": "Bearer k"}) as client:
            reply = await post(client, server)
        assert reply.status == 200
        assert [r.line for r in server.requests] == ["POST /v1/completions HTTP/1.1", "POST /v1/moved HTTP/1.1"]
        assert server.requests[1].body == b'{"prompt":"p"}' and server.requests[1].header("authorization") == "Bearer k"
        assert [r.line for r in other.requests] == ["GET /v1/elsewhere HTTP/1.1"]  # 303: a GET, without the body
        assert other.requests[0].header("authorization") is None  # another origin: the key stays home


@pytest.mark.parametrize(("location", "says", "requests"), [
    ({"Location": "/v1/completions"}, "redirected to /v1/completions after ten redirects", 11),  # a loop
    ({}, "no Location to follow", 1),
])
async def test_a_redirect_it_cannot_follow_ends_the_run_saying_why(location: dict[str, str], says: str,
                                                                   requests: int) -> None:
    reply = keepalive_response(b"", "302 Found", location)
    async with KeepAliveServer(lambda _r: reply) as server, \
            Endpoint(EndpointConfig(base_url=server.base_url, http_backend="httptools")) as ep:
        with pytest.raises(EndpointError) as info:
            await ep.post_json("completions", {"prompt": "p", "max_tokens": 4})
    assert str(info.value) == f"HTTP 302 from {server.base_url}/completions: {says}; use the final URL as the base URL"
    assert len(server.requests) == requests  # the request, and each redirect followed


async def test_an_unreachable_port_is_a_connect_failure() -> None:
    async with KeepAliveServer() as server:
        url = server.base_url
    async with backend() as client:
        with pytest.raises(TransportFailure) as info:
            await client.post(url + "/completions", b"{}", CAP)
    assert info.value.kind == "connect" and "ConnectionRefusedError" in info.value.detail


async def test_urls_it_cannot_send_to_are_connect_failures() -> None:
    async with backend() as client:
        for url in ("ftp://host/v1", "http:///v1", "http://host:99999/v1"):
            with pytest.raises(TransportFailure) as info:
                await client.get(url, CAP)
            assert info.value.kind == "connect" and url in info.value.detail


# --- TLS --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


async def tls_server(cert: Path, key: Path) -> tuple[asyncio.Server, int]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                writer.write(keepalive_response())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1]


async def test_https_checks_the_certificate(certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = certificate
    server, port = await tls_server(cert, key)
    try:
        async with backend() as client:
            with pytest.raises(TransportFailure) as info:
                await client.post(f"https://127.0.0.1:{port}/v1/completions", b"{}", CAP)
        assert info.value.kind == "connect" and "CERTIFICATE_VERIFY_FAILED" in info.value.detail
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what ssl.create_default_context() trusts
        async with backend() as client:
            replies = [await client.post(f"https://127.0.0.1:{port}/v1/completions", b"{}", CAP) for _ in range(3)]
        assert [r.content for r in replies] == [GOOD_BODY] * 3
    finally:
        server.close()
        await server.wait_closed()
