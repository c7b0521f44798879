"""The emitted sbatch script run by bash outside SLURM (stand-in srun/scontrol, stand-in HTTP servers, the real
sglang-router): run-time port, endpoint JSON once ready, the router in front of every replica and following a
replica that moved, cleanup on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

from userturn.serve.manifest import parse_manifest
from userturn.serve.slurm_script import render_slurm

# the real router looks up each worker's tokenizer on the hub: a closed loopback port here, never the internet
LOOPBACK_ONLY = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost",
                 "no_proxy": "127.0.0.1,localhost"}
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_for(check: Callable[[], Any], proc: subprocess.Popen[str], what: str, timeout: float = 60.0) -> Any:
    """The first truthy value of `check` (errors count as not yet), while the script runs."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if value := check():
                return value
        except (OSError, ValueError):
            pass
        assert proc.poll() is None, f"the script exited with {proc.returncode}: {log(proc)[-6000:]}"
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout:.0f}s; the script's output:\n{stop(proc)[-6000:]}")
        time.sleep(0.2)


def endpoint(path: Path) -> Callable[[], Any]:
    return lambda: json.loads(path.read_text())


def www(tmp_path: Path) -> Path:
    """What a stand-in server answers: /health and /v1/models (read by the script and by the router)."""
    root = tmp_path / "www"
    (root / "v1").mkdir(parents=True)
    (root / "v1" / "models").write_text('{"object": "list", "data": [{"id": "served", "object": "model"}]}')
    (root / "health").write_text("ok")
    return root


@contextmanager
def stand_in(root: Path, port: int) -> Iterator[str]:
    """A stand-in replica on another 'node' (127.0.0.1:port), as a process of its own."""
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                             str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                NO_PROXY.open(url + "/health", timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the stand-in replica did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_script(tmp_path: Path, m_fields: dict[str, Any], ep: Path, node: str = "localhost") -> subprocess.Popen[str]:
    """The emitted script as task 0 of array job 5 on `node` (srun and scontrol stand-ins)."""
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "scontrol").write_text(f"#!/bin/bash\necho {node}\n")
    (shims / "srun").write_text('#!/bin/bash\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n')
    for shim in shims.iterdir():
        shim.chmod(0o755)
    root = www(tmp_path)
    m = parse_manifest({"name": "rt", "engine": "sglang", "model": "org/m", "served_model_name": "served",
                        "command": [sys.executable, "-m", "http.server", "{port}", "--bind", "{host}",
                                    "--directory", str(root)], **m_fields})
    script = tmp_path / "job.sbatch"
    script.write_text(render_slurm(m, python=sys.executable))
    env = {"PATH": f"{shims}:/usr/bin:/bin", "HOME": str(tmp_path), **LOOPBACK_ONLY,
           "SLURM_ARRAY_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "0", "SLURM_JOB_ID": "6",
           "SLURM_JOB_NODELIST": "localhost", "SLURM_CPUS_PER_TASK": "1", "SLURM_SUBMIT_DIR": str(tmp_path),
           "USERTURN_ENDPOINT_DIR": str(ep)}
    # the job's log is a file, as under SLURM: a pipe nobody reads would fill up and stall the router's logging
    with (tmp_path / "job.log").open("w") as out:
        proc = subprocess.Popen(["bash", str(script)], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    LOGS[proc.pid] = tmp_path / "job.log"
    return proc


LOGS: dict[int, Path] = {}


def log(proc: subprocess.Popen[str]) -> str:
    return LOGS[proc.pid].read_text(errors="replace")


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM the job's process group (as scancel does), wait for it, return its log."""
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    return log(proc)


@pytest.mark.slow
def test_script_serves_publishes_and_cleans_up(tmp_path: Path) -> None:
    ep = tmp_path / "ep"
    ep.mkdir()
    proc = run_script(tmp_path, {}, ep)
    try:
        mine = wait_for(endpoint(ep / "5_0.json"), proc, "the endpoint file")
        assert mine["base_url"] == f"http://localhost:{mine['port']}/v1" and mine["model"] == "served"
        assert mine["job_id"] == "5" and mine["array_task_id"] == 0 and "smoke" not in mine
    finally:
        out = stop(proc)
    assert not (ep / "5_0.json").exists(), out  # removed on the way out
    assert "userturn: ready http://localhost:" in out


@pytest.mark.slow
def test_script_router_follows_a_replica_that_moved(tmp_path: Path) -> None:
    """Task 0 serves a replica and starts the real sglang-router in front of it and of replica 1 (already up
    elsewhere); replica 1 is requeued and comes back on another port: the router loses the old URL, gains the new."""
    pytest.importorskip("sglang_router", reason="sglang-router is not installed (pip install -e '.[test]')")
    ep = tmp_path / "ep"
    ep.mkdir()
    other_root = www(tmp_path / "other")
    with stand_in(other_root, free_port()) as other, stand_in(other_root, free_port()) as moved:
        (ep / "5_1.json").write_text(json.dumps({"base_url": other + "/v1"}))  # the other array task
        # the node's name is its IPv4 address: the router's client would try 'localhost' as ::1 first
        proc = run_script(tmp_path, {"replicas": 2, "router": {"policy": "round_robin"}}, ep, node="127.0.0.1")
        try:
            mine = wait_for(endpoint(ep / "5_0.json"), proc, "the replica's endpoint file")
            router = wait_for(endpoint(ep / "5_router.json"), proc, "the router's endpoint file")
            assert router["port"] != mine["port"]
            base = router["base_url"].removesuffix("/v1")

            def workers() -> set[str]:
                with NO_PROXY.open(base + "/workers", timeout=10) as r:
                    return {w["url"] for w in json.load(r)["workers"]}

            mine_url = f"http://127.0.0.1:{mine['port']}"
            wait_for(lambda: workers() == {mine_url, other}, proc, "both replicas behind the router")
            with NO_PROXY.open(router["base_url"] + "/models", timeout=10) as r:
                assert r.status == 200
            (ep / "5_1.json").write_text(json.dumps({"base_url": moved + "/v1"}))  # requeued elsewhere
            wait_for(lambda: workers() == {mine_url, moved}, proc, "the moved replica followed")
        finally:
            out = stop(proc)
    assert not (ep / "5_0.json").exists() and not (ep / "5_router.json").exists(), out  # removed on the way out
    assert f"userturn: router: removing {other} (no replica serves there now)" in out
