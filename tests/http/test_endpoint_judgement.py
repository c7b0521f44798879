"""client/http/health.py through `Endpoint`, with injected transports: a hung server, items never answered, a
loading one, 429 storms with and without Retry-After (no attempt spent, the in-flight limit halved), the
preflight's decisions on 4xx, base URLs as people paste them, SOCKS proxies, a malformed usage. Small timeouts
and counted behaviour, no timing assertions."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import httpx
import pytest
from chatml_renderer import Renderer

from userturn.client.data.dataset import DatasetItem
from userturn.client.http import http_client
from userturn.client.http.endpoint import Endpoint, EndpointConfig, split_base_url
from userturn.client.http.health import EndpointHealth
from userturn.client.http.urls import likely_base
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings
from userturn.core.errors import EndpointError, RequestFailed, RetryableError, RetryLater, UserError
from userturn.core.jsonl import read_records

BASE = "http://judgement.test/v1"
OK = {"choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}]}
MODELS = {"object": "list", "data": [{"id": "m", "object": "model"}]}


pytestmark = pytest.mark.usefixtures("fresh_network")


def endpoint(handler: object, url: str = BASE, **overrides: object) -> Endpoint:
    config = {"base_url": url, "max_retries": 1, "backoff_initial": 0.001, "backoff_max": 0.002,
              "request_timeout": 5, **overrides}
    return Endpoint(EndpointConfig(**config), transport=httpx.MockTransport(handler))  # type: ignore[arg-type]


def items(n: int) -> list[DatasetItem]:
    return [DatasetItem.model_validate({"id": f"q{i}", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) for i in range(n)]


# --- hung: the model list answers, completions never do ------------------------------------------------------------

def hung_server(answered: int = 0) -> tuple[object, list[int]]:
    """GET /models answers; the first `answered` POSTs too; every later POST hangs forever."""
    served: list[int] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=MODELS)
        if len(served) < answered:
            served.append(1)
            return httpx.Response(200, json=OK)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return handle, served


async def test_a_hung_server_stops_once_distinct_requests_first_attempts_time_out() -> None:
    """A server that completes nothing, sent 4 requests at a time (deferred on a first timeout, as the probe does):
    the first attempt that times out after 3 request timeouts of silence, with 14 or more in a row timed out (what
    a server with no answered completion needs), stops the run."""
    handle, _ = hung_server()
    outcomes: list[str] = []

    async def worker(ep: Endpoint, ids: list[int]) -> None:
        while ids:
            try:
                await ep.post_json("completions", {"i": ids.pop()}, defer=True)
            except RetryLater:
                outcomes.append("later")
            except RequestFailed as exc:
                outcomes.append(exc.endpoint_down or "")
                return

    async with endpoint(handle, max_retries=20, request_timeout=0.05, hung_after=3, concurrency=4) as ep:
        await ep.check("m")
        ids = list(range(100))
        await asyncio.gather(*(worker(ep, ids) for _ in range(4)))
    stops = [o for o in outcomes if o != "later"]
    assert len(stops) == 4 and len(outcomes) < 40  # every worker stopped, after a few rounds of 4
    assert stops[0].startswith(f"endpoint {BASE} is hung: it answered no request for ")
    assert re.search(r"\(the first attempts of \d+ requests in a row timed out after 0.05s each; a wedged "
                     r"scheduler\?\)", stops[0])


async def test_one_request_timing_out_on_every_attempt_is_an_error_not_a_hung_server() -> None:
    """A single request whose every attempt times out (an item the server never answers) fails alone: its retries'
    timeouts do not count towards hung, however long they take."""
    handle, _ = hung_server()
    async with endpoint(handle, max_retries=4, request_timeout=0.03, hung_after=1) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"prompt": "p"})
    assert info.value.endpoint_down is None and info.value.attempts == 5


@pytest.mark.parametrize(("answered", "timed_out", "streak"), [
    (0, 0, 14),  # no history: as if every other first attempt timed out; 0.5**14 = 6.1e-5 < 1e-4 < 0.5**13
    (100, 0, 3),  # a clean history: the floor (3/103)**3 = 2.5e-5
    (20, 0, 7),  # (7/27)**7 = 7.9e-5 < 1e-4 < (6/26)**6 = 1.5e-4
    (30, 30, 14),  # a live server timing out half the time: as many as with no history
    (10, 90, 14),  # more than half: the share is taken as one half
])
def test_the_streak_that_calls_a_server_hung_by_hand(answered: int, timed_out: int, streak: int) -> None:
    health = EndpointHealth(BASE, request_timeout=1, hung_after=3, loading_max_s=1, throttled_max_s=1)
    health.first_answered = answered
    health.first_timed_out = timed_out + streak  # the streak itself counts in the share
    assert health.hung_streak() == streak
    health.first_timed_out = timed_out + streak - 1
    assert health.hung_streak() > streak - 1


async def test_first_attempts_are_counted_once_each() -> None:
    """The share the hung streak is computed from: 5 requests answered at once, 1 answered after a 500 (its first
    attempt was answered too, by the 500; the retry is no first attempt), 1 whose first attempt timed out."""
    failed: list[int] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        if sent.get("slow") and not failed:
            failed.append(1)
            await asyncio.Event().wait()
        if sent.get("busy") and not failed:
            failed.append(1)
            return httpx.Response(500, text="busy")
        return httpx.Response(200, json=OK)

    async with endpoint(handle, request_timeout=0.05) as ep:
        for i in range(5):
            await ep.post_json("completions", {"i": i})
        await ep.post_json("completions", {"busy": True})
        failed.clear()
        await ep.post_json("completions", {"slow": True})
    assert (ep.health.first_answered, ep.health.first_timed_out) == (6, 1)


def test_time_waiting_on_429s_counts_towards_the_throttled_stop() -> None:
    """0.6 s since the last success with a bound of 1 s: a 429 whose wait (0.5 s) would carry past the bound stops
    the run now; one whose wait (0.1 s) does not, goes on; a Retry-After at the bound stops at once."""
    health = EndpointHealth(BASE, request_timeout=1, hung_after=3, loading_max_s=1, throttled_max_s=1.0)
    health.last_success -= 0.6
    refusal = RetryableError(f"HTTP 429 from {BASE}/completions: slow down", kind="throttled")
    assert health.stop_reason(refusal, first=True, wait=0.1) is None
    stop = health.stop_reason(refusal, first=True, wait=0.5)
    assert stop is not None and stop.startswith(f"endpoint {BASE} refused every request for 1s: HTTP 429")
    fresh = EndpointHealth(BASE, request_timeout=1, hung_after=3, loading_max_s=1, throttled_max_s=1.0)
    quota = RetryableError("HTTP 429 ...", retry_after=1.0, kind="throttled")
    assert (fresh.stop_reason(quota, first=True, wait=1.0) or "").startswith(f"endpoint {BASE} asks to wait 1s")


async def test_retried_timeouts_go_behind_items_not_yet_tried(tmp_path: Path) -> None:
    """Items q0-q4 are never answered, the other 25 are: at concurrency 2 every answerable item is sent before any
    second attempt, the run finishes (no hung stop) with 5 error records, and the rerun sends only those 5."""
    order: list[str] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["prompt"]
        item = "q" + prompt.split("ITEM")[1].split("END")[0]
        order.append(item)
        if item in {"q0", "q1", "q2", "q3", "q4"}:
            await asyncio.Event().wait()
        return httpx.Response(200, json=OK)

    tagged = [DatasetItem.model_validate({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"ITEM{i}END"}, {"role": "assistant", "content": "hello"}]}) for i in range(30)]
    out = tmp_path / "out.jsonl"
    async with endpoint(handle, max_retries=2, request_timeout=0.05, hung_after=1) as ep:
        run = ProbeRun(tagged, ProbeSettings(model="m", dataset="d", concurrency=2), endpoints=[ep],
                       renderer=Renderer(), out_path=str(out), progress=False)
        summary = await run.run()
    assert (summary.ok, summary.errors) == (25, 5)
    first_retry = next(i for i, item in enumerate(order) if order.index(item) < i)
    assert len(set(order[:first_retry])) == 30  # every item tried once before any retry
    records, _ = read_records(out)
    assert sorted(r.item_id for r in records.values() if r.status == "error") == ["q0", "q1", "q2", "q3", "q4"]
    assert all(r.attempts == 3 and "gave up after 3 attempts" in (r.error or "") for r in records.values()
               if r.status == "error")
    order.clear()
    async with endpoint(lambda r: order.append("x") or httpx.Response(200, json=OK)) as ep:
        run = ProbeRun(tagged, ProbeSettings(model="m", dataset="d", concurrency=2), endpoints=[ep],
                       renderer=Renderer(), out_path=str(out), progress=False)
        summary = await run.run()
    assert (summary.ok, summary.errors, len(order)) == (5, 0, 5)


async def test_timeouts_of_a_server_that_answers_other_requests_are_not_hung() -> None:
    """One request keeps timing out while others are answered: that sample fails alone, the run goes on."""

    async def handle(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["id"] == "slow":
            await asyncio.Event().wait()
        return httpx.Response(200, json=OK)

    async def others(ep: Endpoint, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await ep.post_json("completions", {"id": "other"})
            await asyncio.sleep(0.002)

    async with endpoint(handle, max_retries=4, request_timeout=0.03, hung_after=1) as ep:
        stop = asyncio.Event()
        background = asyncio.create_task(others(ep, stop))
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"id": "slow"})
        stop.set()
        await background
    assert info.value.attempts == 5 and info.value.endpoint_down is None
    assert info.value.reason == "timeout after 0.03s (gave up after 5 attempts)"


async def test_the_pipeline_stops_on_a_hung_server_keeps_its_records_and_says_it_is_hung(tmp_path: Path) -> None:
    handle, served = hung_server(answered=3)
    out = tmp_path / "out.jsonl"
    async with endpoint(handle, max_retries=5, request_timeout=0.05) as ep:
        run = ProbeRun(items(30), ProbeSettings(model="m", dataset="d", concurrency=1), endpoints=[ep],
                       renderer=Renderer(), out_path=str(out), progress=False)
        with pytest.raises(EndpointError) as info:
            await run.run()
    message = str(info.value)
    assert message.startswith(f"endpoint {BASE} is hung: ")
    assert message.endswith(f"completed records are kept in {out} (3 from this run): rerun the same command to "
                            "resume")
    records, _ = read_records(out)
    assert len(served) == 3 and [r.status for r in records.values()] == ["ok"] * 3  # no error record


# --- loading: 503 with Retry-After ---------------------------------------------------------------------------------

def loading_then_ok(loading: int) -> tuple[object, list[int]]:
    seen: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        if len(seen) <= loading:
            return httpx.Response(503, headers={"retry-after": "0"}, json={"error": {"message": "model loading"}})
        return httpx.Response(200, json=OK)

    return handle, seen


async def test_a_loading_server_is_waited_for_without_spending_attempts() -> None:
    handle, seen = loading_then_ok(12)
    async with endpoint(handle, max_retries=1) as ep:
        result = await ep.post_json("completions", {"prompt": "p"})
    assert result.attempts == 13 and len(seen) == 13  # 12 loading replies, then the answer: 2 attempts allowed


async def test_a_server_loading_past_the_bound_stops_the_run_saying_what_it_said() -> None:
    handle, _ = loading_then_ok(10**9)
    async with endpoint(handle, max_retries=0, loading_max_s=0.02) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"prompt": "p"})
    down = info.value.endpoint_down
    assert down is not None and down.startswith(f"endpoint {BASE} is still loading after ")
    assert down.endswith(f"s: HTTP 503 from {BASE}/completions: model loading (Retry-After: 0)")
    assert info.value.attempts >= 2  # more than the retry budget (1): loading spent none


async def test_a_503_without_retry_after_still_spends_attempts() -> None:
    async with endpoint(lambda r: httpx.Response(503, text="busy"), max_retries=2) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"prompt": "p"})
    assert info.value.attempts == 3


# --- 429 without Retry-After: the in-flight limit adapts ----------------------------------------------------------

async def test_429s_without_retry_after_halve_the_limit_and_spend_no_attempt() -> None:
    seen: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        if len(seen) <= 6:
            return httpx.Response(429, json={"error": {"message": "slow down"}})
        return httpx.Response(200, json=OK)

    async with endpoint(handle, max_retries=0, concurrency=64) as ep:
        result = await ep.post_json("completions", {"prompt": "p"})
        assert result.attempts == 7  # six 429s and the answer, with no retry allowed
        assert ep.limit.decreases == 6 and ep.limit.limit == 2  # 64 -> 32 -> ... -> 1, +1 for the success
        for _ in range(4):
            await ep.post_json("completions", {"prompt": "p"})
        assert int(ep.limit.limit) == 3  # additive increase: about one slot per limit's worth of successes


async def test_a_429_with_retry_after_lowers_the_limit_and_spends_no_attempt() -> None:
    seen: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        if len(seen) <= 3:
            return httpx.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "slow down"}})
        return httpx.Response(200, json=OK)

    async with endpoint(handle, max_retries=0, concurrency=8) as ep:
        result = await ep.post_json("completions", {"prompt": "p"})
        assert result.attempts == 4 and ep.limit.decreases == 3


async def test_a_429_asking_for_more_than_a_run_waits_stops_at_once() -> None:
    quota = {"error": {"message": "quota exhausted"}}
    async with endpoint(lambda r: httpx.Response(429, headers={"retry-after": "3600"}, json=quota),
                        max_retries=5) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"prompt": "p"})
    assert info.value.attempts == 1
    assert info.value.endpoint_down == (
        f"endpoint {BASE} asks to wait 3600s before the next request, longer than a run waits (300s): HTTP 429 from "
        f"{BASE}/completions: quota exhausted (Retry-After: 3600); rerun the same command once its quota is back, or "
        "lower --concurrency / set --rpm / --tpm under its limit")


async def test_a_429_wait_is_the_larger_of_its_retry_after_and_the_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry-After 0 does not make a refused request come straight back: it waits one backoff step (0.5-1 s here;
    not a growing one: the in-flight limit paces); a longer Retry-After wins over the backoff."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    replies = iter(["0", "0", "0", "9"])

    def handle(request: httpx.Request) -> httpx.Response:
        after = next(replies, None)
        return httpx.Response(200, json=OK) if after is None else httpx.Response(429, headers={"retry-after": after})

    async with endpoint(handle, backoff_initial=0.5, backoff_max=30) as ep:
        await ep.post_json("completions", {"prompt": "p"})
    assert len(sleeps) == 4 and sleeps[-1] == 9
    assert all(0.5 <= s <= 1.0 for s in sleeps[:3])


async def test_a_loading_server_saying_retry_after_0_is_polled_with_a_growing_backoff(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    handle, _ = loading_then_ok(8)
    async with endpoint(handle, backoff_initial=0.5, backoff_max=30) as ep:
        await ep.post_json("completions", {"prompt": "p"})
    assert len(sleeps) == 8 and sleeps[-1] >= 30  # 0.5, 1, 2, ... 30: not twice a second for as long as it loads


async def test_a_server_that_only_throttles_stops_the_run_after_the_bound() -> None:
    refusal = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}
    async with endpoint(lambda r: httpx.Response(429, json=refusal), throttled_max_s=0.02) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"prompt": "p"})
    down = info.value.endpoint_down
    assert down is not None and down.startswith(f"endpoint {BASE} refused every request for ")
    assert down.endswith(f"s: HTTP 429 from {BASE}/completions: You exceeded your current quota; lower --concurrency "
                         "or set --rpm / --tpm under its limit")


async def test_a_429_storm_over_concurrent_requests_ends_with_every_request_answered() -> None:
    """A server that accepts at most 2 requests at a time and refuses the rest with a bare 429: the limit comes down
    and every one of 64 concurrent requests is answered, with one attempt allowed each."""
    busy = 0

    async def handle(request: httpx.Request) -> httpx.Response:
        nonlocal busy
        if busy >= 2:
            return httpx.Response(429)
        busy += 1
        try:
            await asyncio.sleep(0.002)
        finally:
            busy -= 1
        return httpx.Response(200, json=OK)

    async with endpoint(handle, max_retries=0, concurrency=64, backoff_max=0.01) as ep:
        results = await asyncio.gather(*(ep.post_json("completions", {"prompt": str(i)}) for i in range(64)))
        assert len(results) == 64 and ep.limit.limit < 64 and ep.limit.in_flight == 0


# --- the preflight decides ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "body", "tail"), [
    (407, '<?xml version="1.0" ?>\n<html><head><title>407 Proxy Authentication Required</title></head>\n<body>'
          "<h1>Proxy Authentication Required</h1></body></html>",
     " (the proxy wants credentials: http://USER:PASSWORD@HOST:PORT in --proxy or HTTPS_PROXY)"),
    (400, "<html><head><title>400 Request Header Or Cookie Too Large</title></head></html>", ""),
    (405, '{"detail": "Method Not Allowed"}', ""),
    (413, "Payload Too Large", " (is the API key's variable holding something else?)"),
    (431, "Request Header Fields Too Large", " (is the API key's variable holding something else?)"),
])
async def test_a_4xx_on_the_model_list_stops_before_any_completion(status: int, body: str, tail: str) -> None:
    sent: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        return httpx.Response(status, text=body)

    async with endpoint(handle) as ep:
        with pytest.raises(EndpointError) as info:
            await ep.check("m")
    shown = {400: "400 Request Header Or Cookie Too Large", 405: "Method Not Allowed",
             407: "407 Proxy Authentication Required"}.get(status, body)
    assert str(info.value) == (f"{BASE}/models refused the preflight request with HTTP {status}: {shown}{tail}; "
                               "nothing was sent")
    assert sent == ["GET"]


async def test_a_404_on_the_model_list_goes_on_when_no_other_base_lists_models() -> None:
    async with endpoint(lambda r: httpx.Response(404)) as ep:
        assert await ep.check("m") == []
    async with endpoint(lambda r: httpx.Response(404), url="http://judgement.test:8000") as ep:
        assert await ep.check("m") == []  # .../v1/models is a 404 too: no hint to give


async def test_a_base_without_v1_is_named_with_the_base_to_use() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=MODELS)
        return httpx.Response(404, json={"detail": "Not Found"})

    async with endpoint(handle, url="http://judgement.test:8000/") as ep:
        with pytest.raises(UserError) as info:
            await ep.check("m")
        assert type(info.value) is UserError
        assert str(info.value) == ("http://judgement.test:8000/models answered HTTP 404, and "
                                   "http://judgement.test:8000/v1/models lists models: did you mean --base-url "
                                   "http://judgement.test:8000/v1?")
        with pytest.raises(EndpointError) as first:  # without the preflight: the first request says it
            await ep.post_json("completions", {"prompt": "p"})
    assert str(first.value) == ('HTTP 404 from http://judgement.test:8000/completions: Not Found; did you mean '
                                "--base-url http://judgement.test:8000/v1?")
    assert first.value.resumable is False


@pytest.mark.parametrize(("pasted", "base"), [
    ("http://127.0.0.1:30000/v1/completions", "http://127.0.0.1:30000/v1"),
    ("https://api.example.com/v1/chat/completions/", "https://api.example.com/v1"),
    ("https://res.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=2024-10-21",
     "https://res.openai.azure.com/openai/deployments/gpt?api-version=2024-10-21"),
])
def test_a_base_url_ending_in_a_request_path_is_refused_with_the_base_to_use(pasted: str, base: str) -> None:
    with pytest.raises(UserError) as info:
        split_base_url(pasted)
    tail = "/chat/completions" if "chat" in pasted else "/completions"
    assert str(info.value) == (f"base URL {pasted} ends in {tail}, which userturn adds to every request itself: use "
                               f"{base} as the base URL")


def test_likely_base() -> None:
    assert likely_base("http://h:8000") == "http://h:8000/v1"
    assert likely_base("http://h:8000/api") == "http://h:8000/api/v1"
    assert likely_base("http://h:8000/v1") is None
    assert likely_base("https://h/v1beta/openai") is None
    assert likely_base("https://res.openai.azure.com/openai/deployments/gpt") is None


async def test_a_404_stops_the_run_without_resume_advice_and_leaves_no_results_file(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    async with endpoint(lambda r: httpx.Response(404, json={"detail": "Not Found"}), url="http://h.test:8000") as ep:
        run = ProbeRun(items(5), ProbeSettings(model="m", dataset="d", concurrency=2), endpoints=[ep],
                       renderer=Renderer(), out_path=str(out), progress=False)
        with pytest.raises(EndpointError) as info:
            await run.run()
    assert str(info.value) == ("HTTP 404 from http://h.test:8000/completions: Not Found; did you mean --base-url "
                               "http://h.test:8000/v1?")
    assert not out.exists()


# --- SOCKS proxies ---------------------------------------------------------------------------------------------

NO_SOCKS = "userturn speaks to http:// and https:// proxies only, not SOCKS; use an HTTP proxy (--proxy http://HOST:PORT)"


def test_a_socks_proxy_flag_is_refused_in_one_line_without_its_password() -> None:
    with pytest.raises(UserError) as info:
        http_client.configure(proxy="socks5://user:hunter22@proxy:1080")
    assert str(info.value) == f"--proxy socks5://proxy:1080: {NO_SOCKS}"


@pytest.mark.parametrize("name", ["ALL_PROXY", "all_proxy", "HTTPS_PROXY"])
def test_a_socks_proxy_from_the_environment_is_refused_in_one_line(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "socks5h://user:hunter22@proxy.corp:1080")
    with pytest.raises(UserError) as info:
        Endpoint(EndpointConfig(base_url="https://api.example.com/v1"))
    assert str(info.value) == f"${name} is socks5h://proxy.corp:1080: {NO_SOCKS} (or NO_PROXY for api.example.com)"
    monkeypatch.setenv("NO_PROXY", "api.example.com")  # not used for this host: nothing to refuse
    Endpoint(EndpointConfig(base_url="https://api.example.com/v1"))
    monkeypatch.delenv("NO_PROXY")
    http_client.configure(proxy="http://proxy.corp:3128")  # --proxy replaces the environment's
    Endpoint(EndpointConfig(base_url="https://api.example.com/v1"))


def test_an_http_proxy_without_a_scheme_is_an_http_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "proxy.corp:3128")
    Endpoint(EndpointConfig(base_url="https://api.example.com/v1"))


# --- a malformed usage ---------------------------------------------------------------------------------------------

async def test_a_malformed_usage_is_dropped_with_a_note_and_the_completion_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reply = {"choices": [{"index": 0, "text": "Why?", "finish_reason": "stop"}],
             "usage": {"prompt_tokens": "n/a", "completion_tokens": 3}}
    out = tmp_path / "out.jsonl"
    async with endpoint(lambda r: httpx.Response(200, json=reply)) as ep:
        run = ProbeRun(items(3), ProbeSettings(model="m", dataset="d", concurrency=1), endpoints=[ep],
                       renderer=Renderer(), out_path=str(out), progress=False)
        with caplog.at_level(logging.WARNING, logger="userturn"):
            summary = await run.run()
    assert summary.ok == 3 and summary.errors == 0
    records, _ = read_records(out)
    assert [(r.status, r.user_turn, r.usage) for r in records.values()] == [("ok", "Why?", None)] * 3
    notes = [r.getMessage() for r in caplog.records if "malformed usage" in r.getMessage()]
    assert notes == [f"userturn: warning: {BASE} answered a malformed usage (usage.prompt_tokens: Input should be a "
                     "valid integer, unable to parse string as an integer): it is left out of the records, the "
                     "completions are kept"]


async def test_a_hung_judge_endpoint_stops_the_judging_saying_it_is_hung() -> None:
    from userturn.judges.llm_judge import JudgeConfig, LLMJudge
    from userturn.judges.prompt import load_prompt

    handle, _ = hung_server()
    judge = LLMJudge(JudgeConfig(model="m", base_url=BASE), load_prompt())
    await judge.aclose()
    judge.endpoint = endpoint(handle, max_retries=20, request_timeout=0.05)  # the same stack, over a hung server
    async with judge.endpoint:
        await judge.check()
        with pytest.raises(EndpointError) as info:  # 16 records judged at a time: 16 first attempts time out,
            # then their retries (which decide nothing), then the next 16 first attempts stop it
            await asyncio.gather(*(judge.judge("q", "r", f"t{i}") for i in range(48)))
    assert str(info.value).startswith(f"judge m: endpoint {BASE} is hung: it answered no request for ")
