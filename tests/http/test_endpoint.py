"""client/http/endpoint.py: retry classes, Retry-After, deadlines, fatal statuses, preflight, counters.

HTTP is mocked with respx at the httpx level (the transport is aiohttp-backed, so `using="httpx"`);
the `slow` tests talk to a real loopback server process with injected faults.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import respx
from loopback_server import LoopbackServer
from ports import free_port

from userturn.client.http.endpoint import Endpoint, EndpointConfig, RequestFailed
from userturn.client.http.http_client import HttpReply
from userturn.client.http.replies import RETRY_AFTER_READ_MAX_S, parse_retry_after, server_message
from userturn.core.errors import EndpointError

BASE = "http://mock.test/v1"
OK_BODY = {"choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}], "usage": {"prompt_tokens": 1}}


def ok() -> httpx.Response:
    return httpx.Response(200, json=OK_BODY)


def endpoint(**overrides: object) -> Endpoint:
    """An endpoint with fast backoff so retry tests take milliseconds."""
    config = {"base_url": BASE, "max_retries": 3, "backoff_initial": 0.001, "backoff_max": 0.002,
              "request_timeout": 5.0, **overrides}
    return Endpoint(EndpointConfig(**config))


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(using="httpx", base_url=BASE, assert_all_called=False) as router:
        yield router


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record every positive asyncio.sleep (the endpoint's and tenacity's waits) without waiting."""
    recorded: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float, result: object = None) -> object:
        if delay > 0:
            recorded.append(delay)
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    return recorded


# --- success and counters ---------------------------------------------------------------------------------------

async def test_success_is_one_attempt_with_key_and_json(mock: respx.MockRouter,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UT_TEST_KEY", "sk-123")
    route = mock.post("/completions").mock(return_value=ok())
    async with endpoint(api_key_env="UT_TEST_KEY") as ep:
        result = await ep.post_json("/completions", {"prompt": "p", "max_tokens": 4})
        assert result.data == OK_BODY
        assert result.attempts == 1
        assert result.latency_s >= 0
        assert (ep.stats.requests, ep.stats.retries, ep.stats.failures) == (1, 0, 0)
        assert ep.stats.inflight == {}
    sent = route.calls.last.request
    assert sent.headers["authorization"] == "Bearer sk-123"
    assert sent.headers["content-type"] == "application/json"
    assert sent.read() == b'{"prompt":"p","max_tokens":4}'


async def test_no_key_no_authorization_header(mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UT_MISSING_KEY", raising=False)
    route = mock.post("/completions").mock(return_value=ok())
    async with endpoint(api_key_env="UT_MISSING_KEY") as ep:
        await ep.post_json("completions", {})
    assert "authorization" not in route.calls.last.request.headers


async def test_inflight_tracked_during_call_and_empty_after(mock: respx.MockRouter) -> None:
    seen: list[int] = []
    ep = endpoint()

    async def slow(request: httpx.Request) -> httpx.Response:
        seen.append(len(ep.stats.inflight))
        await asyncio.sleep(0.01)
        return ok()

    mock.post("/completions").mock(side_effect=slow)
    async with ep:
        results = await asyncio.gather(*(ep.post_json("completions", {"i": i}) for i in range(20)))
    assert len(results) == 20
    assert max(seen) == 20  # all twenty were in flight together
    assert ep.stats.inflight == {}
    assert ep.stats.requests == 20


# --- each retry class -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 529, 599])
async def test_retryable_status_then_success(mock: respx.MockRouter, status: int) -> None:
    route = mock.post("/completions").mock(side_effect=[httpx.Response(status, text="busy"), ok()])
    async with endpoint() as ep:
        result = await ep.post_json("completions", {})
        assert result.attempts == 2
        assert (ep.stats.retries, ep.stats.failures) == (1, 0)
        assert ep.stats.inflight == {}
    assert route.call_count == 2


async def test_retry_after_delta_seconds_is_honoured(mock: respx.MockRouter, sleeps: list[float]) -> None:
    mock.post("/completions").mock(side_effect=[
        httpx.Response(429, headers={"Retry-After": "7"}),
        httpx.Response(429, headers={"Retry-After": "3"}),
        ok(),
    ])
    async with endpoint(backoff_initial=0.5, backoff_max=1.0) as ep:
        result = await ep.post_json("completions", {})
    assert result.attempts == 3
    assert sleeps == [7.0, 3.0]  # first wait (fast path) and tenacity's wait both use the header


async def test_retry_after_http_date_is_honoured(mock: respx.MockRouter, sleeps: list[float]) -> None:
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    mock.post("/completions").mock(side_effect=[httpx.Response(503, headers={"Retry-After": when}), ok()])
    async with endpoint(backoff_initial=0.5) as ep:
        result = await ep.post_json("completions", {})
    assert result.attempts == 2
    assert len(sleeps) == 1
    assert 28.0 <= sleeps[0] <= 30.0  # HTTP dates have whole-second resolution


async def test_retry_after_really_waits(mock: respx.MockRouter) -> None:
    mock.post("/completions").mock(side_effect=[httpx.Response(429, headers={"Retry-After": "0.3"}), ok()])
    async with endpoint() as ep:
        start = time.monotonic()
        await ep.post_json("completions", {})
        assert time.monotonic() - start >= 0.29


async def test_backoff_without_retry_after_grows_and_is_capped(mock: respx.MockRouter,
                                                                sleeps: list[float]) -> None:
    mock.post("/completions").mock(side_effect=[httpx.Response(503)] * 5 + [ok()])
    async with endpoint(max_retries=5, backoff_initial=1.0, backoff_max=2.5) as ep:
        result = await ep.post_json("completions", {})
    assert result.attempts == 6
    assert len(sleeps) == 5
    assert sleeps[0] <= 2.0  # backoff_initial, plus up to as much jitter
    assert all(1.0 <= s <= 2.5 for s in sleeps)
    assert sleeps[-1] == 2.5  # capped by backoff_max


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError,
                                   httpx.WriteError])
async def test_connection_errors_are_retried(mock: respx.MockRouter, error: type[Exception]) -> None:
    route = mock.post("/completions").mock(side_effect=[error, error, ok()])
    async with endpoint() as ep:
        result = await ep.post_json("completions", {})
        assert result.attempts == 3
        assert ep.stats.retries == 2
    assert route.call_count == 3


async def test_per_attempt_deadline_cuts_a_hung_attempt_and_retries(mock: respx.MockRouter) -> None:
    calls = 0

    async def hang_once(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(30)
        return ok()

    mock.post("/completions").mock(side_effect=hang_once)
    async with endpoint(request_timeout=0.2) as ep:
        start = time.monotonic()
        result = await ep.post_json("completions", {})
        elapsed = time.monotonic() - start
    assert result.attempts == 2
    assert 0.2 <= elapsed < 2.0


async def test_deadline_exhausted_reports_timeout(mock: respx.MockRouter) -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return ok()  # pragma: no cover

    mock.post("/completions").mock(side_effect=hang)
    async with endpoint(request_timeout=0.05, max_retries=1) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {})
    assert info.value.attempts == 2
    assert "timeout after 0.05s" in info.value.reason


@pytest.mark.parametrize("bad", [
    httpx.Response(200, content=b'{"choices": [{"text": "cut'),
    httpx.Response(200, content=b"<html>gateway</html>"),
    httpx.Response(200, content=b"[1, 2]"),
    httpx.Response(200, content=b""),
], ids=["truncated", "html", "not-an-object", "empty"])
async def test_invalid_json_body_is_retried(mock: respx.MockRouter, bad: httpx.Response) -> None:
    route = mock.post("/completions").mock(side_effect=[bad, ok()])
    async with endpoint() as ep:
        result = await ep.post_json("completions", {})
    assert result.attempts == 2
    assert result.data == OK_BODY
    assert route.call_count == 2


async def test_200_with_error_body_is_retried(mock: respx.MockRouter) -> None:
    mock.post("/completions").mock(side_effect=[
        httpx.Response(200, json={"error": {"message": "engine overloaded"}}), ok()])
    async with endpoint() as ep:
        result = await ep.post_json("completions", {})
    assert result.attempts == 2


async def test_error_body_reason_when_exhausted(mock: respx.MockRouter) -> None:
    mock.post("/completions").mock(return_value=httpx.Response(200, json={"error": {"message": "engine overloaded"}}))
    async with endpoint(max_retries=1) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {})
    assert "error body" in info.value.reason
    assert "engine overloaded" in info.value.reason


# --- no retry ---------------------------------------------------------------------------------------------------

async def test_400_fails_at_once_with_server_message(mock: respx.MockRouter) -> None:
    route = mock.post("/completions").mock(return_value=httpx.Response(
        400, json={"error": {"message": "prompt is longer than the context window", "type": "invalid_request"}}))
    async with endpoint() as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {})
        assert (ep.stats.retries, ep.stats.failures) == (0, 1)
        assert ep.stats.inflight == {}
    assert route.call_count == 1
    assert info.value.status == 400
    assert info.value.attempts == 1
    assert info.value.reason == f"HTTP 400 from {BASE}/completions: prompt is longer than the context window"


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_fatal_status_raises_endpoint_error_after_one_attempt(mock: respx.MockRouter, status: int) -> None:
    route = mock.post("/completions").mock(return_value=httpx.Response(status, json={"detail": "nope"}))
    async with endpoint() as ep:
        with pytest.raises(EndpointError) as info:
            await ep.post_json("completions", {})
        assert ep.stats.failures == 1
        assert ep.stats.inflight == {}
    assert route.call_count == 1
    message = str(info.value)
    assert f"HTTP {status}" in message
    assert f"{BASE}/completions" in message
    assert "nope" in message
    assert "\n" not in message


async def test_422_is_not_retried(mock: respx.MockRouter) -> None:
    route = mock.post("/completions").mock(return_value=httpx.Response(422, text="bad field"))
    async with endpoint() as ep:
        with pytest.raises(RequestFailed):
            await ep.post_json("completions", {})
    assert route.call_count == 1


# --- giving up --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("max_retries", [1, 3])
async def test_exhausted_retries_raise_request_failed(mock: respx.MockRouter, max_retries: int) -> None:
    route = mock.post("/completions").mock(return_value=httpx.Response(503, json={"error": "warming up"}))
    async with endpoint(max_retries=max_retries) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {})
        assert ep.stats.retries == max_retries
        assert ep.stats.failures == 1
        assert ep.stats.inflight == {}
    attempts = max_retries + 1
    assert route.call_count == attempts
    assert info.value.attempts == attempts
    assert "HTTP 503" in info.value.reason
    assert "warming up" in info.value.reason
    assert f"gave up after {attempts} attempts" in info.value.reason


async def test_max_retries_zero_means_one_attempt(mock: respx.MockRouter) -> None:
    route = mock.post("/completions").mock(side_effect=httpx.ConnectError)
    async with endpoint(max_retries=0) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {})
        assert ep.stats.retries == 0
    assert route.call_count == 1
    assert info.value.attempts == 1
    assert "connection error: ConnectError" in info.value.reason



async def test_attempts_count_includes_retries_before_a_4xx(mock: respx.MockRouter) -> None:
    route = mock.post("/completions").mock(side_effect=[httpx.Response(503), httpx.Response(503),
                                                        httpx.Response(400, text="bad")])
    async with endpoint() as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {})
    assert route.call_count == 3
    assert info.value.attempts == 3


async def test_fatal_status_during_retries_still_stops_the_run(mock: respx.MockRouter) -> None:
    route = mock.post("/completions").mock(side_effect=[httpx.Response(502), httpx.Response(401, text="expired")])
    async with endpoint() as ep:
        with pytest.raises(EndpointError, match="HTTP 401"):
            await ep.post_json("completions", {})
    assert route.call_count == 2


# --- preflight --------------------------------------------------------------------------------------------------

async def test_check_lists_models(mock: respx.MockRouter) -> None:
    mock.get("/models").mock(return_value=httpx.Response(200, json={"data": [{"id": "a"}, {"id": "b"}, {}]}))
    async with endpoint() as ep:
        assert [m.id for m in await ep.check()] == ["a", "b"]


@pytest.mark.parametrize("response", [httpx.Response(404), httpx.Response(200, text="not json"),
                                      httpx.Response(200, json=["x"])], ids=["404", "text", "list"])
async def test_check_tolerates_servers_without_models(mock: respx.MockRouter, response: httpx.Response) -> None:
    mock.get("/models").mock(return_value=response)
    async with endpoint() as ep:
        assert await ep.check() == []


@pytest.mark.parametrize("status", [401, 403])
async def test_check_refused_key_names_url_and_env(mock: respx.MockRouter, status: int) -> None:
    mock.get("/models").mock(return_value=httpx.Response(status, json={"error": {"message": "bad key"}}))
    async with endpoint(api_key_env="MY_KEY_VAR") as ep:
        with pytest.raises(EndpointError) as info:
            await ep.check()
    message = str(info.value)
    assert f"{BASE}/models" in message
    assert f"HTTP {status}" in message
    assert "bad key" in message
    assert "$MY_KEY_VAR" in message




async def test_check_unreachable_names_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    async with Endpoint(EndpointConfig(base_url=url, request_timeout=5)) as ep:
        with pytest.raises(EndpointError) as info:
            await ep.check()
    assert f"cannot reach {url}/models" in str(info.value)
    assert "\n" not in str(info.value)


def test_url_joins_without_double_slashes() -> None:
    ep = Endpoint(EndpointConfig(base_url="http://h:1/v1/"))
    assert ep.url("/completions") == "http://h:1/v1/completions"
    assert ep.url("chat/completions") == "http://h:1/v1/chat/completions"


# --- helpers ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("", None), ("5", 5.0), (" 2.5 ", 2.5), ("-3", 0.0), ("1e9", RETRY_AFTER_READ_MAX_S), ("nan", None),
    ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
])
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize(("body", "expected"), [
    ({"error": {"message": "too\n  long"}}, "too long"),
    ({"error": "plain"}, "plain"),
    ({"detail": "not found"}, "not found"),
    ({"error": {"detail": "x"}}, "x"),
])
def test_server_message(body: object, expected: str) -> None:
    assert server_message(HttpReply(400, json.dumps(body).encode(), "Bad Request", None)) == expected


def test_server_message_text_and_empty() -> None:
    assert server_message(HttpReply(502, b"  Bad\ngateway ", "Bad Gateway", None)) == "Bad gateway"
    assert server_message(HttpReply(502, b"x" * 1000, "Bad Gateway", None)) == "x" * 300
    assert server_message(HttpReply(502, b"", "Bad Gateway", None)) == "Bad Gateway"
    assert server_message(HttpReply(502, b"\xff\xfe", "", None)) == "\ufffd\ufffd"
    assert server_message(HttpReply(502, b"", "", None)) == "no message"


# --- real sockets -----------------------------------------------------------------------------------------------

async def completion(ep: Endpoint) -> object:
    return await ep.post_json("completions", {"model": "m", "prompt": "<|im_start|>user\nhello", "n": 2})


@pytest.mark.slow
@pytest.mark.parametrize("fault", [
    ["--fail-mode", "status", "--fail-status", "503"],
    ["--fail-mode", "status", "--fail-status", "429", "--retry-after", "0"],
    ["--fail-mode", "close"],
    ["--fail-mode", "invalid-json"],
], ids=["503", "429", "close", "invalid-json"])
async def test_real_server_faults_are_retried(fault: list[str]) -> None:
    with LoopbackServer("--fail-first", "2", *fault) as server:
        async with Endpoint(EndpointConfig(base_url=server.base_url, max_retries=3,
                                           backoff_initial=0.01, backoff_max=0.02, request_timeout=10)) as ep:
            result = await ep.post_json("completions", {"model": "m", "prompt": "<|im_start|>user\nhi", "n": 2})
            assert ep.stats.retries == 2
        stats = server.stats()
    assert result.attempts == 3
    assert [c["finish_reason"] for c in result.data["choices"]] == ["stop", "stop"]
    assert result.data["choices"][0]["matched_stop"] == "<|im_end|>"
    assert stats["faults"] == 2
    assert stats["completions"] == 3
    assert stats["answered"] == 1


@pytest.mark.slow
async def test_real_server_slow_attempt_is_cut_by_deadline() -> None:
    with LoopbackServer("--fail-first", "1", "--fail-mode", "slow", "--slow-ms", "5000") as server:
        async with Endpoint(EndpointConfig(base_url=server.base_url, request_timeout=0.5,
                                           backoff_initial=0.01, backoff_max=0.02)) as ep:
            start = time.monotonic()
            result = await ep.post_json("completions", {"prompt": "hi"})
            elapsed = time.monotonic() - start
    assert result.attempts == 2
    assert 0.5 <= elapsed < 3.0


@pytest.mark.slow
async def test_real_server_retry_after_is_waited_out() -> None:
    with LoopbackServer("--fail-first", "1", "--fail-status", "429", "--retry-after", "0.4") as server:
        async with Endpoint(EndpointConfig(base_url=server.base_url, backoff_initial=0.01)) as ep:
            start = time.monotonic()
            result = await ep.post_json("completions", {"prompt": "hi"})
            elapsed = time.monotonic() - start
    assert result.attempts == 2
    assert elapsed >= 0.4


@pytest.mark.slow
async def test_real_server_exhausted_and_fatal_and_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    with LoopbackServer("--fail-first", "100", "--fail-status", "502", "--api-key", "right") as server:
        config = EndpointConfig(base_url=server.base_url, max_retries=2, backoff_initial=0.01,
                                backoff_max=0.02, api_key_env="UT_LOOPBACK_KEY")
        monkeypatch.setenv("UT_LOOPBACK_KEY", "wrong")
        async with Endpoint(config) as ep:
            with pytest.raises(EndpointError, match="refused the API key"):
                await ep.check()
            with pytest.raises(EndpointError, match="HTTP 401"):
                await completion(ep)
        monkeypatch.setenv("UT_LOOPBACK_KEY", "right")
        async with Endpoint(config) as ep:
            assert [m.id for m in await ep.check("loopback")] == ["loopback"]
            with pytest.raises(RequestFailed) as info:
                await completion(ep)
            assert ep.stats.failures == 1
        stats = server.stats()
    assert info.value.attempts == 3
    assert "HTTP 502" in info.value.reason
    assert "injected fault" in info.value.reason
    assert stats["faults"] == 3
    assert stats["unauthorized"] == 2


@pytest.mark.slow
async def test_real_server_many_concurrent_requests() -> None:
    with LoopbackServer("--latency-ms", "5") as server:
        async with Endpoint(EndpointConfig(base_url=server.base_url, concurrency=32)) as ep:
            results = await asyncio.gather(*(completion(ep) for _ in range(300)))
            assert ep.stats.inflight == {}
            assert ep.stats.retries == 0
        stats = server.stats()
    assert len(results) == 300
    assert stats["answered"] == 300


@pytest.mark.slow
async def test_real_server_dropped_connection_is_not_called_a_timeout() -> None:
    with LoopbackServer("--fail-first", "1", "--fail-mode", "close") as server:
        async with Endpoint(EndpointConfig(base_url=server.base_url, max_retries=0)) as ep:
            with pytest.raises(RequestFailed) as info:
                await completion(ep)
    assert "timeout" not in info.value.reason
    assert info.value.reason.startswith("connection error: ")
