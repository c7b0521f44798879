"""Every emitted command line starts on the real engines' parsers: SGLang 0.5.23 and vLLM 0.33.0, each in a scratch
venv of its own, parse the argv of every form userturn emits (the local launch with a generated key starting with
'-', `userturn serve --dry-run`, the SLURM srun line expanded by bash, every Kubernetes container with Kubernetes'
`$(VAR)` expansion) for every shipped SGLang and vLLM manifest and constructed ones (GLM-4.5-Air and gpt-oss on vLLM,
a `deterministic: true` SGLang manifest, a multi-node one), and the parsed values are what userturn meant.

The engine side is tests/support/engine_argv_check.py, run by the scratch venv's python (userturn is not installed
there):
SGLang's `prepare_server_args` (what `python -m sglang.launch_server` runs before it loads a model) and `vllm serve`'s
parser plus the checks it makes before loading (reasoning parser names against vLLM's registry); vLLM's own
`CompletionRequest` checks the stop list a probe sends. vLLM runs with VLLM_TARGET_DEVICE=cpu (its CPU platform: a
CUDA build finds no device here and cannot build its default DeviceConfig). Nothing is stubbed in either engine.

Skipped unless USERTURN_SGLANG_PYTHON / USERTURN_VLLM_PYTHON name those venvs' pythons; docs/serving.md ("Checking
emitted command lines against the engines' parsers") has the commands that create them and run this file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from userturn.cli.app import main
from userturn.client.render.stops import fit_stops
from userturn.serve.commands import replica_specs
from userturn.serve.engines import engine_of
from userturn.serve.k8s_manifests import CLUSTER_PORT, render_k8s
from userturn.serve.manifest import Manifest, load_manifest
from userturn.serve.slurm_script import render_slurm

pytestmark = pytest.mark.engine_parsers
ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).parents[1] / "support" / "engine_argv_check.py"
KEY = "-Zq3_generated"  # a generated key that starts with '-' (about 1 in 64 do)
DRY_RUN_KEY = "<generated at launch>"
PYTHONS = {"sglang": "USERTURN_SGLANG_PYTHON", "vllm": "USERTURN_VLLM_PYTHON"}
GLM_STOPS = ["<|user|>", "<|assistant|>", "<|observation|>", "<|system|>", "<|endoftext|>"]
GLM_TOKEN_IDS = {"<|endoftext|>": 151329, "<|user|>": 151336, "<|assistant|>": 151337, "<|observation|>": 151338,
                 "<|system|>": 151335}  # GLM-4.5's tokenizer: each stop is one special token
SLURM_ENV = {"USERTURN_PYTHON": "python3", "PORT": "8124", "MODEL": "/models/m", "SERVED": "served-m",
             "USERTURN_API_KEY": KEY, "SLURM_NODEID": "1", "USERTURN_DIST_INIT_ADDR": "10.0.0.1:5000",
             "SLURM_CPUS_PER_TASK": "4"}
K8S_ENV = {"USERTURN_API_KEY": KEY, "LWS_LEADER_ADDRESS": "10.0.0.2", "LWS_WORKER_INDEX": "1"}


def _python(engine: str) -> str:
    python = os.environ.get(PYTHONS[engine], "")
    if not python:
        pytest.skip(f"{PYTHONS[engine]} is unset: it names the python of a scratch venv with {engine} "
                    "(docs/serving.md, 'Checking emitted command lines against the engines' parsers')")
    return python


def check(engine: str, items: list[dict[str, Any]], env: dict[str, str] | None = None) -> dict[str, Any]:
    """The checker's answer for `items`, run by the engine's scratch venv with `env` added."""
    # HF_HUB_OFFLINE=1 makes vLLM's EngineArgs swap a hub id for its cached snapshot (absent here): left unset
    run_env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    run_env.update({"VLLM_TARGET_DEVICE": "cpu", **(env or {})})
    done = subprocess.run([_python(engine), str(CHECKER)], input=json.dumps({"engine": engine, "items": items}),
                          capture_output=True, text=True, env=run_env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----- the emitted forms -------------------------------------------------------------------------------------------


def _launch(m: Manifest) -> list[tuple[str, list[str], dict[str, Any]]]:
    spec = replica_specs(m, [8123], python="python3", api_key=KEY if m.api_key else None)[0]
    return [("launch", spec.argv, {"port": 8123, "key": KEY, "model": m.resolve_path(m.model), "env": spec.env})]


def _dry_run(m: Manifest, path: Path, capsys: pytest.CaptureFixture[str]) -> list[tuple[str, list[str], dict]]:
    capsys.readouterr()
    assert main(["serve", str(path), "--dry-run"]) == 0
    out, port, forms = capsys.readouterr().out, None, []
    for line in out.splitlines():
        if line.startswith("#"):
            found = re.search(r"(?:port |:)(\d+)(?: of node 0)?$", line)
            port = int(found.group(1)) if found else port
            continue
        words = shlex.split(line)
        env = {}
        while re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        forms.append((f"dry-run {len(forms)}", words, {"port": port, "key": DRY_RUN_KEY, "node": len(forms),
                                                       "model": m.resolve_path(m.model), "env": env}))
    assert forms, out
    return forms


def _slurm(m: Manifest) -> list[tuple[str, list[str], dict[str, Any]]]:
    script = render_slurm(m)
    (line,) = [s for s in script.splitlines() if s.startswith("srun ")]
    words = shlex.split(line)
    assert words[-4:-2] == ["bash", "-c"] and words[-1] == "&", line
    # bash itself expands the line's "$VAR" words: printf shows each resulting argument
    done = subprocess.run(["bash", "-c", "printf '%s\\0' " + words[-2]], env={"PATH": os.environ["PATH"], **SLURM_ENV},
                          capture_output=True, text=True, check=True)
    argv = done.stdout.split("\0")[:-1]
    env = dict(re.findall(r"^export ([A-Z_][A-Z0-9_]*)=(\S+)$", script, re.M))
    return [("slurm", argv, {"host": "0.0.0.0", "port": 8124, "key": KEY, "model": SLURM_ENV["MODEL"],
                             "served": SLURM_ENV["SERVED"], "node": 1, "dist": SLURM_ENV["USERTURN_DIST_INIT_ADDR"],
                             "env": env})]


def _k8s_expand(word: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of `$(VAR)` in a container's command ($$ escapes; unknown names stay as written)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda f: "$" if f.group(0) == "$$" else env.get(f.group(1), f.group(0)), word)


def _k8s(m: Manifest, pod_root: Path) -> list[tuple[str, list[str], dict[str, Any]]]:
    """The server containers' argv; a ConfigMap mounted in the pod is written under `pod_root` (and its mount path
    in the argv points there), so the engine finds the shipped files as the pod would."""
    docs = list(yaml.safe_load_all(render_k8s(m)))
    shipped = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    forms = []
    for doc in docs:
        spec = doc.get("spec", {})
        templates = ([spec["template"]] if "template" in spec else
                     [spec["leaderWorkerTemplate"][t] for t in ("leaderTemplate", "workerTemplate")]
                     if "leaderWorkerTemplate" in spec else [])
        for rank, template in enumerate(templates):
            for c in template["spec"]["containers"]:
                if c["name"] != "server":
                    continue
                env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
                volumes = {v["name"]: v for v in template["spec"]["volumes"]}
                mounts = {}
                for mount in c["volumeMounts"]:
                    config = volumes[mount["name"]].get("configMap")
                    if config is not None:
                        local = pod_root / mount["mountPath"].lstrip("/")
                        local.mkdir(parents=True, exist_ok=True)
                        for key, text in shipped[config["name"]].items():
                            (local / key).write_text(text)
                        mounts[mount["mountPath"]] = str(local)
                known = {**K8S_ENV, **env}
                argv = [_k8s_expand(w, known) for w in c["command"] + c.get("args", [])]
                for pod_dir, local_dir in mounts.items():
                    argv = [local_dir + w[len(pod_dir):] if w.startswith(pod_dir + "/") else w for w in argv]
                forms.append((f"k8s {doc['kind']} {rank}", argv, {
                    "host": "0.0.0.0", "port": m.port or CLUSTER_PORT, "key": KEY, "model": m.resolve_path(m.model),
                    "node": rank,
                    "dist": f"{K8S_ENV['LWS_LEADER_ADDRESS']}:50000", "env": env}))
    assert forms
    return forms


def emitted(m: Manifest, path: Path, capsys: pytest.CaptureFixture[str],
            tmp_path: Path) -> list[tuple[str, list[str], dict]]:
    forms = [*_dry_run(m, path, capsys), *_slurm(m), *_k8s(m, tmp_path / f"pod-{path.stem}")]
    return forms + (_launch(m) if m.nnodes == 1 else [])


# ----- the manifests -----------------------------------------------------------------------------------------------


def _shipped(engine: str) -> list[Path]:
    return [p for p in sorted((ROOT / "manifests").glob("*.yaml")) if load_manifest(p).engine == engine]


def _constructed(tmp_path: Path, name: str, base: str | None, **changes: Any) -> Path:
    data = yaml.safe_load((ROOT / "manifests" / base).read_text()) if base else {}
    data.update(changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _every_key(tmp_path: Path, engine: str) -> Path:
    """Every optional launch key set (the chat template a local file: Kubernetes ships it in a ConfigMap)."""
    template = tmp_path / "template.jinja"
    template.write_text("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>")
    return _constructed(tmp_path, f"every-key-{engine}", "qwen3.5-9b.yaml", engine=engine, deterministic=False,
                        tokenizer="Qwen/Qwen3.5-9B", revision="main", chat_template=str(template),
                        load_format="dummy", trust_remote_code=True, dp_size=2, gpus=2, port=8999,
                        env={"NCCL_DEBUG": "WARN"})


def manifests(engine: str, tmp_path: Path) -> list[Path]:
    if engine == "sglang":
        return [*_shipped("sglang"), _every_key(tmp_path, "sglang"),
                _constructed(tmp_path, "deterministic", "qwen3.5-9b.yaml", deterministic=True),
                _constructed(tmp_path, "two-nodes", "qwen3.5-9b.yaml", nnodes=2, tp_size=2, gpus=4,
                             dist_init_addr="10.0.0.1:5000", cluster={"k8s": {"cache_pvc": "weights"}})]
    return [*_shipped("vllm"), _every_key(tmp_path, "vllm"),
            _constructed(tmp_path, "glm-vllm", "glm-4.5-air.yaml", engine="vllm", deterministic=False),
            _constructed(tmp_path, "glm-vllm-5", "glm-4.5-air.yaml", engine="vllm", deterministic=False,
                         env={"VLLM_MAX_STOP_STRINGS": "5"}),
            _constructed(tmp_path, "gpt-oss-vllm", "gpt-oss-20b.yaml", engine="vllm", deterministic=False,
                         reasoning_parser="openai_gptoss")]


def _expect(engine: str, m: Manifest, meant: dict[str, Any], got: dict[str, Any]) -> None:
    """The parsed values are what userturn meant."""
    served = meant.get("served", m.request_model_name)
    common = {"port": meant["port"], "host": meant.get("host", m.host),
              "reasoning_parser": m.reasoning_parser or ("" if engine == "vllm" else None),
              "dtype": m.dtype or "auto", "trust_remote_code": m.trust_remote_code}
    common.update({"revision": m.revision, "load_format": m.load_format or "auto"})
    if engine == "sglang":
        want = {**common, "model_path": meant["model"], "api_key": meant["key"] if m.api_key else None,
                "sampling_defaults": "openai", "enable_deterministic_inference": m.deterministic,
                "tp_size": m.tp_size, "dp_size": m.dp_size, "served_model_name": served, "random_seed": m.seed,
                "nnodes": m.nnodes, "mem_fraction_static": m.mem_fraction_static,
                "context_length": m.context_length}
        if m.nnodes > 1:
            want["node_rank"] = meant.get("node", 0)
            want["dist_init_addr"] = meant.get("dist", m.dist_init_addr or "<node0-host>:<dist-port>")
    else:
        want = {**common, "model": meant["model"], "api_key": [meant["key"]] if m.api_key else None,
                "generation_config": "vllm", "tensor_parallel_size": m.tp_size, "data_parallel_size": m.dp_size,
                "served_model_name": [served], "seed": m.seed, "max_model_len": m.context_length}
        if m.mem_fraction_static is not None:
            want["gpu_memory_utilization"] = m.mem_fraction_static
    assert {k: got[k] for k in want} == want
    assert (got["chat_template"] is None) is (m.chat_template is None)
    assert (got["tokenizer_path" if engine == "sglang" else "tokenizer"] is None) is (m.tokenizer is None)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_every_emitted_argv_starts_on_the_engines_parser(engine: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _python(engine)
    cases, items = [], []
    for path in manifests(engine, tmp_path):
        m = load_manifest(path)
        for form, argv, meant in emitted(m, path, capsys, tmp_path):
            label = f"{path.name} {form}"
            cases.append((label, m, meant, path.name))
            items.append({"label": label, "argv": argv})
    answer = check(engine, items)
    assert answer["version"] == {"sglang": "0.5.23", "vllm": "0.33.0"}[engine]
    failed = {r["label"]: r["error"] for r in answer["results"] if "error" in r}
    assert not failed, failed
    for (label, m, meant, _), result in zip(cases, answer["results"], strict=True):
        assert result["label"] == label
        _expect(engine, m, meant, result["values"])
    print(f"{engine} {answer['version']}: {len(items)} command lines from {len(set(c[3] for c in cases))} "
          "manifests parsed", file=sys.stderr)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_parser_spellings_are_the_engines_own(engine: str) -> None:
    """The definition's reasoning parser names, and every alias it maps to, are the engine's registry."""
    d = engine_of(load_manifest(_shipped(engine)[0]))
    real = set(check(engine, [])["reasoning_parsers"])
    assert set(d.reasoning_parsers) == real
    assert set(d.parser_aliases.values()) <= real


def test_vllm_takes_the_stops_a_probe_sends_under_the_emitted_env(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """GLM-4.5-Air on vLLM: the stop list each request sends (fit_stops under the launch's limit) passes vLLM's own
    request validation in the environment every emitted form gives the server; the full list of 5 does not under
    vLLM's default."""
    _python("vllm")
    for name, env in (("glm-vllm", {}), ("glm-vllm-5", {"VLLM_MAX_STOP_STRINGS": "5"})):
        path = _constructed(tmp_path, name, "glm-4.5-air.yaml", engine="vllm", deterministic=False,
                            **({"env": env} if env else {}))
        m = load_manifest(path)
        limit = engine_of(m).engine_traits(m).max_stop_strings
        stops, ids = fit_stops(GLM_STOPS, [], GLM_TOKEN_IDS, limit, send_ids=True, ids_carry=True, engine="vllm")
        assert sorted(stops + [s for s in GLM_STOPS if GLM_TOKEN_IDS[s] in ids]) == sorted(GLM_STOPS)
        items = []
        for form, argv, meant in emitted(m, path, capsys, tmp_path):
            assert {k: v for k, v in meant["env"].items() if k.startswith("VLLM_")} == env, form
            items.append({"label": form, "argv": argv, "stop": stops})
        results = check("vllm", items, env)["results"]  # the server's environment, as every form sets it
        assert [r for r in results if "stop_error" in r or "error" in r] == []
    answer = check("vllm", [{"label": "all five", "argv": ["vllm", "serve", "m"], "stop": GLM_STOPS}])
    assert "stop_error" in answer["results"][0]  # the check can fail: vLLM's default limit is 4
