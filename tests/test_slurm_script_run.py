"""The emitted sbatch script run by bash outside SLURM (stand-in srun/scontrol, a stand-in HTTP server and
sglang-router): run-time port, endpoint JSON once ready, the router in front of every replica, cleanup on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from userturn.serve.manifest import parse_manifest
from userturn.serve.slurm_script import render_slurm

FAKE_ROUTER = """import functools, http.server, json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_ROUTER_ARGS"], "w") as fh:
    json.dump(args, fh)
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=os.environ["FAKE_WWW"])
http.server.ThreadingHTTPServer(("0.0.0.0", int(args[args.index("--port") + 1])), handler).serve_forever()
"""


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the script exited with {proc.returncode}: {proc.stdout.read()}"  # type: ignore
        assert time.monotonic() < deadline, f"{path.name} not written in {timeout:.0f}s"
        time.sleep(0.2)
    return json.loads(path.read_text())


@pytest.mark.slow
def test_script_serves_publishes_routes_and_cleans_up(tmp_path: Path) -> None:
    www = tmp_path / "www"
    (www / "v1").mkdir(parents=True)
    (www / "v1" / "models").write_text('{"data": []}')
    (www / "health").write_text("ok")
    mods = tmp_path / "mods" / "sglang_router"
    mods.mkdir(parents=True)
    (mods / "__init__.py").write_text("")
    (mods / "launch_router.py").write_text(FAKE_ROUTER)
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "scontrol").write_text("#!/bin/bash\necho localhost\n")
    (shims / "srun").write_text('#!/bin/bash\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n')
    for shim in shims.iterdir():
        shim.chmod(0o755)
    m = parse_manifest({"name": "rt", "engine": "sglang", "model": "org/m", "served_model_name": "served",
                        "replicas": 2, "router": {"policy": "round_robin"},
                        "command": [sys.executable, "-m", "http.server", "{port}", "--bind", "{host}",
                                    "--directory", str(www)]})
    script = tmp_path / "job.sbatch"
    script.write_text(render_slurm(m, python=sys.executable))
    ep = tmp_path / "ep"
    ep.mkdir()
    (ep / "5_1.json").write_text(json.dumps({"base_url": "http://otherhost:1234/v1"}))  # the other array task
    env = {"PATH": f"{shims}:/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "mods"), "HOME": str(tmp_path),
           "SLURM_ARRAY_JOB_ID": "5", "SLURM_ARRAY_TASK_ID": "0", "SLURM_JOB_ID": "6",
           "SLURM_JOB_NODELIST": "localhost", "SLURM_CPUS_PER_TASK": "1", "SLURM_SUBMIT_DIR": str(tmp_path),
           "USERTURN_ENDPOINT_DIR": str(ep),
           "FAKE_WWW": str(www), "FAKE_ROUTER_ARGS": str(tmp_path / "router-args.json")}
    proc = subprocess.Popen(["bash", str(script)], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        mine = wait_for(ep / "5_0.json", proc)
        assert mine["base_url"] == f"http://localhost:{mine['port']}/v1" and mine["model"] == "served"
        assert mine["job_id"] == "5" and mine["array_task_id"] == 0 and "smoke" not in mine
        router = wait_for(ep / "5_router.json", proc)
        args = json.loads((tmp_path / "router-args.json").read_text())
        i = args.index("--worker-urls")
        assert args[i + 1:i + 3] == [f"http://localhost:{mine['port']}", "http://otherhost:1234"]
        assert args[args.index("--host") + 1] == "0.0.0.0" and args[args.index("--policy") + 1] == "round_robin"
        assert router["port"] != mine["port"]
        with urllib.request.urlopen(router["base_url"] + "/models", timeout=10) as r:
            assert r.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert not (ep / "5_0.json").exists() and not (ep / "5_router.json").exists(), out  # removed on the way out
    assert "userturn: ready http://localhost:" in out
