"""SLURM and Kubernetes renderers: the files parse, and carry the right flags and resources."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from userturn.client.cli import main
from userturn.client.errors import UserError
from userturn.serve.emit import render_k8s, render_slurm
from userturn.serve.manifest import load_manifest, parse_manifest

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
MULTI = {
    "engine": "sglang", "model": "Qwen/Qwen3.5-397B-A17B", "served_model_name": "big", "tp_size": 16, "nnodes": 2,
    "gpus": 16, "name": "Big Model", "env": {"NCCL_DEBUG": "WARN"},
    "cluster": {"slurm": {"partition": "gpu", "account": "lab", "setup": ["source /opt/venv/bin/activate"],
                          "dist_port": 29500},
                "k8s": {"image": "lmsysorg/sglang:v0.5", "namespace": "ml", "hf_token_secret": "hf",
                        "cache_pvc": "hf-cache"}},
}


def bash_syntax_ok(script: str, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def srun_inner(script: str) -> list[str]:
    """The server argv run by srun's `bash -c '...'` (variables left as written)."""
    line = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    words = shlex.split(line)
    assert words[-3:-1] == ["bash", "-c"]
    return shlex.split(words[-1], posix=False)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_slurm_multinode(tmp_path: Path) -> None:
    script = render_slurm(parse_manifest(MULTI))
    bash_syntax_ok(script, tmp_path)
    assert script.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --job-name=userturn-big-model",
                 "source /opt/venv/bin/activate", "export NCCL_DEBUG=WARN",
                 'NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
                 'export USERTURN_DIST_INIT_ADDR="$HEAD_NODE:29500"'):
        assert line in script.splitlines()
    assert "srun --nodes=2 --ntasks-per-node=1" in script
    inner = srun_inner(script)
    assert inner[:3] == ["python3", "-m", "sglang.launch_server"]
    i = inner.index("--node-rank")
    assert inner[i + 1] == '"$SLURM_NODEID"'
    assert inner[inner.index("--dist-init-addr") + 1] == '"$USERTURN_DIST_INIT_ADDR"'
    assert inner[inner.index("--nnodes") + 1] == "2" and inner[inner.index("--tp-size") + 1] == "16"
    assert inner[inner.index("--host") + 1] == "0.0.0.0"


def test_slurm_node_rank_expands_per_task(tmp_path: Path) -> None:
    """Run the srun line's inner command through bash with SLURM_NODEID set: the rank and address expand."""
    script = render_slurm(parse_manifest(MULTI))
    inner_cmd = shlex.split(next(ln for ln in script.splitlines() if ln.startswith("srun ")))[-1]
    shim = tmp_path / "python3"
    shim.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    shim.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_NODEID": "1", "USERTURN_DIST_INIT_ADDR": "node0:29500"}
    out = subprocess.run(["bash", "-c", inner_cmd], env=env, capture_output=True, text=True, check=True).stdout
    args = out.splitlines()
    assert args[args.index("--node-rank") + 1] == "1"
    assert args[args.index("--dist-init-addr") + 1] == "node0:29500"


def test_slurm_replicas_become_a_job_array(tmp_path: Path) -> None:
    m = parse_manifest({"engine": "sglang", "model": "x", "tp_size": 2, "replicas": 3})
    script = render_slurm(m)
    bash_syntax_ok(script, tmp_path)
    assert "#SBATCH --array=0-2" in script and "#SBATCH --gpus-per-node=2" in script
    assert "--nnodes" not in script


def test_k8s_deployment_and_service() -> None:
    m = load_manifest(MANIFESTS / "qwen3.5-27b.yaml")
    docs = list(yaml.safe_load_all(render_k8s(m)))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    dep, svc = docs
    assert dep["apiVersion"] == "apps/v1" and dep["spec"]["replicas"] == 1
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert c["command"][c["command"].index("--tp-size") + 1] == "2"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert c["startupProbe"]["failureThreshold"] == 180  # 1800 s startup_timeout / 10 s period
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"] == labels and svc["spec"]["selector"] == labels
    assert svc["spec"]["ports"][0]["port"] == 30000


def test_k8s_multinode_leaderworkerset() -> None:
    docs = list(yaml.safe_load_all(render_k8s(parse_manifest(MULTI))))
    lws, svc = docs
    assert lws["kind"] == "LeaderWorkerSet" and lws["metadata"]["namespace"] == "ml"
    tpl = lws["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == 2
    leader = tpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tpl["workerTemplate"]["spec"]["containers"][0]
    for c, rank in ((leader, "0"), (worker, "$(LWS_WORKER_INDEX)")):
        cmd = c["command"]
        assert cmd[cmd.index("--node-rank") + 1] == rank
        assert cmd[cmd.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):29500"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert c["image"] == "lmsysorg/sglang:v0.5"
        assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in c["env"]
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    assert svc["spec"]["selector"]["role"] == "leader"
    volumes = tpl["leaderTemplate"]["spec"]["volumes"]
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}} in volumes


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_manifest_renders(path: Path, tmp_path: Path) -> None:
    m = load_manifest(path)
    docs = list(yaml.safe_load_all(render_k8s(m)))
    assert docs and all(isinstance(d, dict) for d in docs)
    if shutil.which("bash"):
        bash_syntax_ok(render_slurm(m), tmp_path)


def test_external_cannot_be_emitted() -> None:
    with pytest.raises(UserError, match="nothing to deploy"):
        render_slurm(parse_manifest({"engine": "external", "base_url": "http://h/v1"}))


def test_cli_emit_writes_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "jobs" / "qwen.sbatch"
    assert main(["serve", str(MANIFESTS / "qwen3.5-9b.yaml"), "--emit", "slurm", "--out", str(out)]) == 0
    assert out.read_text().startswith("#!/bin/bash")
    assert f"wrote {out}" in capsys.readouterr().err
    assert main(["serve", str(MANIFESTS / "qwen3.5-9b.yaml"), "--emit", "k8s"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["Deployment", "Service"]
