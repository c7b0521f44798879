"""The sbatch script's router follower against the real sglang-router (0.3, from PyPI, on the CPU): a replica that
appears later is added, and a replica that moved after a requeue has its dead URL removed and its new URL added."""

from __future__ import annotations

import http.server
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from userturn.serve.commands import router_argv
from userturn.serve.manifest import parse_manifest
from userturn.serve.slurm_script import FOLLOW_END, FOLLOW_REPLICAS, render_slurm

DEADLINE_S = 60.0
# the router looks up each worker's tokenizer on the hub: pointed at a closed loopback port, never the internet;
# its requests to the workers never go through a proxy
LOOPBACK_ONLY = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost",
                 "no_proxy": "127.0.0.1,localhost"}
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _Worker(http.server.BaseHTTPRequestHandler):
    """A stand-in SGLang server: the routes sglang-router reads when it registers and health-checks a worker."""

    ROUTES: ClassVar[dict[str, dict[str, Any]]] = {"/health": {}, "/server_info": {"model_path": "m"},
                                                   "/model_info": {"model_path": "m"}}

    def do_GET(self) -> None:
        body = json.dumps(self.ROUTES.get(self.path, {"error": "not found"})).encode()
        self.send_response(200 if self.path in self.ROUTES else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _http(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with NO_PROXY.open(url, timeout=10) as r:
        return json.loads(r.read())


def _wait(what: str, check: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"{what} within {DEADLINE_S:.0f} s; follower and router output:\n{log.read_text()[-4000:]}")


def _write_endpoint(folder: Path, task: int, root: str) -> None:
    (folder / f"77_{task}.json").write_text(json.dumps({"base_url": root + "/v1"}))


def _follower_argv(folder: Path, replicas: int, initial: list[str]) -> list[str]:
    """The follower exactly as the emitted sbatch script starts it: its source read by bash from the script's
    here-document, its "$VAR" words filled in ($WORKERS: the router's first worker URLs, one argument each)."""
    m = parse_manifest({"engine": "sglang", "model": "m", "replicas": replicas, "router": {"policy": "round_robin"}})
    lines = render_slurm(m).splitlines()
    start = lines.index(f"    FOLLOW_REPLICAS=$(cat <<'{FOLLOW_END}'")
    end = lines.index("    )", start)
    source = subprocess.run(["bash", "-c", "\n".join([*lines[start:end + 1], 'printf %s "$FOLLOW_REPLICAS"'])],
                            capture_output=True, text=True, check=True).stdout
    assert source == FOLLOW_REPLICAS.rstrip("\n")  # verbatim: nothing expanded or unquoted
    words = shlex.split(lines[end + 1])
    assert words[:3] == ["$USERTURN_PYTHON", "-c", "$FOLLOW_REPLICAS"] and words[-2:] == ["$WORKERS", "&"], words
    values = {"$USERTURN_PYTHON": [sys.executable], "$FOLLOW_REPLICAS": [source], "$ENDPOINT_DIR": [str(folder)],
              "$JOB": ["77"], "$WORKERS": initial}
    return [v for w in words[:-1] for v in values.get(w, [w])]


@contextmanager
def _router_and_follower(tmp_path: Path, initial: list[str], replicas: int = 2) -> Iterator[Callable[[], set[str]]]:
    """The real sglang-router started with `initial` as its workers, then the follower beside it (polling every
    0.2 s); yields a function listing the router's worker URLs. The endpoint files must be written by the caller."""
    pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install -e '.[test]')")
    port = _free_port()
    m = parse_manifest({"engine": "sglang", "model": "m", "host": "127.0.0.1", "replicas": replicas,
                        "router": {"policy": "round_robin"}})
    base = f"http://127.0.0.1:{port}"

    def listed() -> set[str]:
        return {w["url"] for w in _get(base + "/workers")["workers"]}

    with (tmp_path / "processes.log").open("w") as out:
        router = subprocess.Popen(router_argv(m, initial, port=port, python=sys.executable), stdout=out,
                                  stderr=subprocess.STDOUT, env={**os.environ, **LOOPBACK_ONLY})
        follower = None
        try:
            _wait("the router lists its first workers", lambda: listed() == set(initial), tmp_path / "processes.log")
            follower = subprocess.Popen(_follower_argv(tmp_path, replicas, initial), stdout=out,
                                        stderr=subprocess.STDOUT,
                                        env={"ROUTER_PORT": str(port), "USERTURN_ROUTER_POLL_S": "0.2"})
            yield listed
        finally:
            for proc in (follower, router):
                if proc is not None:
                    proc.terminate()
                    proc.wait(timeout=30)


def test_follower_removes_a_requeued_replica_from_the_real_router(tmp_path: Path) -> None:
    log = tmp_path / "processes.log"
    with _http(_Worker) as first, _http(_Worker) as later, _http(_Worker) as moved:
        _write_endpoint(tmp_path, 0, first)
        with _router_and_follower(tmp_path, [first]) as listed:
            _write_endpoint(tmp_path, 1, later)
            _wait("the later replica is added", lambda: listed() == {first, later}, log)
            _write_endpoint(tmp_path, 1, moved)  # requeued: the task runs again elsewhere, its old URL is dead
            _wait("the moved replica's old URL is removed and its new URL added",
                  lambda: listed() == {first, moved}, log)
    text = log.read_text()
    assert f"userturn: router: adding replica 1 at {later}" in text
    assert f"userturn: router: removing {later} (no replica serves there now)" in text
    assert "adding replica 0" not in text  # given to the router at its start, never added twice


def test_follower_removes_a_replica_that_moved_before_it_started(tmp_path: Path) -> None:
    """The router starts with both replicas; replica 1 moves before the follower's first look: its old URL is known
    from the router's first worker list, and removed."""
    log = tmp_path / "processes.log"
    with _http(_Worker) as first, _http(_Worker) as old, _http(_Worker) as moved:
        _write_endpoint(tmp_path, 0, first)
        _write_endpoint(tmp_path, 1, moved)
        with _router_and_follower(tmp_path, [first, old]) as listed:
            _wait("the old URL replaced by the new one", lambda: listed() == {first, moved}, log)
            (tmp_path / "77_1.json").unlink()  # the task ended (its EXIT trap removed the file): it leaves the router
            _wait("a replica whose task ended is removed", lambda: listed() == {first}, log)
    assert f"userturn: router: removing {old} (no replica serves there now)" in log.read_text()


class _OldRouter(http.server.BaseHTTPRequestHandler):
    """A router before 0.3: no /workers route."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_follower_names_a_router_without_the_workers_api(tmp_path: Path) -> None:
    _write_endpoint(tmp_path, 0, "http://n0:8000")
    with _http(_OldRouter) as base:
        proc = subprocess.run(_follower_argv(tmp_path, 1, []), env={"ROUTER_PORT": base.rsplit(":", 1)[1]},
                              capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stdout.strip() == (f"userturn: router: {base}/workers answered 404: following replicas needs "
                                   "sglang-router 0.3 or later (its /workers API); replicas that start later or "
                                   "move are not added")
