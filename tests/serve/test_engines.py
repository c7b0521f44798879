"""The engine registry: one definition per kind, each the only place that knows its engine, checked against facts
from the engines' own source (SGLang 0.5.23, vLLM 0.33.0, llama.cpp as vendored in llama-cpp-python 0.3.36)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from userturn.core.engine_traits import EXTERNAL
from userturn.core.errors import UserError
from userturn.serve.commands import server_argv
from userturn.serve.engines import ENGINES, engine_of
from userturn.serve.k8s_manifests import render_k8s
from userturn.serve.manifest import load_manifest, parse_manifest
from userturn.serve.slurm_script import check_deployable, render_slurm, resources

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def test_every_kind_has_a_definition_with_traits_and_a_pinned_image() -> None:
    assert set(ENGINES) == {"sglang", "vllm", "transformers", "llamacpp", "external"}
    for kind, engine in ENGINES.items():
        assert engine.kind == kind and engine.traits.engine == kind  # one name: the records say the kind
        assert engine.image is None or (":" in engine.image and not engine.image.endswith(":latest")), kind
    assert ENGINES["external"].traits is EXTERNAL


def test_no_shipped_output_names_a_latest_image() -> None:
    for path in MANIFESTS.glob("*.yaml"):
        m = load_manifest(path)
        if engine_of(m).image:
            assert ":latest" not in render_k8s(m), path.name


def test_sglang_starts_neutral_and_says_the_seed_is_not_honoured() -> None:
    m = parse_manifest({"engine": "sglang", "model": "m/x"})
    argv = server_argv(m, port=1, python="py")
    assert argv[argv.index("--sampling-defaults") + 1] == "openai"  # default 'model': generation_config.json
    traits = engine_of(m).engine_traits(m)
    assert traits.seed_honoured is False and traits.server_sampler_defaults == {}
    assert (traits.stop_reason_field, traits.reasoning_field) == ("matched_stop", "reasoning_content")
    assert traits.weights_route == "/model_info"  # its /v1/models `root` is the served name


def test_deterministic_sglang_honours_the_seed() -> None:
    m = parse_manifest({"engine": "sglang", "model": "m/x", "deterministic": True})
    assert "--enable-deterministic-inference" in server_argv(m, port=1, python="py")
    assert engine_of(m).engine_traits(m).seed_honoured is True
    with pytest.raises(UserError, match="deterministic is only supported by engine 'sglang'"):
        parse_manifest({"engine": "vllm", "model": "m/x", "deterministic": True})


def test_vllm_traits_name_its_own_fields_and_stop_limit() -> None:
    m = load_manifest(MANIFESTS / "qwen3.5-9b-vllm.yaml")
    traits = engine_of(m).engine_traits(m)
    assert (traits.stop_reason_field, traits.reasoning_field, traits.max_stop_strings) == ("stop_reason",
                                                                                           "reasoning", 4)
    assert traits.seed_honoured is True and traits.server_sampler_defaults == {}
    raised = parse_manifest({"engine": "vllm", "model": "m", "env": {"VLLM_MAX_STOP_STRINGS": "8"}})
    assert engine_of(raised).engine_traits(raised).max_stop_strings == 8


def test_vllm_stop_limit_must_be_a_number() -> None:
    with pytest.raises(UserError, match="VLLM_MAX_STOP_STRINGS: 'many' is not a whole number"):
        parse_manifest({"engine": "vllm", "model": "m", "env": {"VLLM_MAX_STOP_STRINGS": "many"}})


@pytest.mark.parametrize(("engine", "given", "spelling"), [("vllm", "gpt-oss", "openai_gptoss"),
                                                           ("sglang", "openai_gptoss", "gpt-oss"),
                                                           ("vllm", "deepseek-r1", "deepseek_r1")])
def test_reasoning_parser_is_checked_in_the_engines_own_spelling(engine: str, given: str, spelling: str) -> None:
    with pytest.raises(UserError) as info:
        parse_manifest({"engine": engine, "model": "m", "reasoning_parser": given})
    assert f"its name for it: {spelling!r}" in str(info.value) and "\n" not in str(info.value)
    parse_manifest({"engine": engine, "model": "m", "reasoning_parser": spelling})


def test_every_shipped_manifest_names_a_parser_its_engine_knows() -> None:
    for path in MANIFESTS.glob("*.yaml"):
        m = load_manifest(path)
        if m.reasoning_parser:
            assert m.reasoning_parser in engine_of(m).reasoning_parsers, path.name


def test_a_key_starting_with_a_dash_is_read_as_the_key_by_argparse() -> None:
    """SGLang and vLLM parse with argparse: `--api-key -xyz` is an error there, `--api-key=-xyz` the key."""
    key = "-Zq3_generated"
    for engine in ("sglang", "vllm"):
        argv = server_argv(parse_manifest({"engine": engine, "model": "m", "api_key": "generate"}), port=1,
                           python="py", api_key=key)
        parser = argparse.ArgumentParser(allow_abbrev=False)
        parser.add_argument("--api-key")
        known, _ = parser.parse_known_args(argv)
        assert known.api_key == key, engine


def test_slurm_lines_find_every_python_engine_through_userturn_python() -> None:
    vllm = render_slurm(load_manifest(MANIFESTS / "qwen3.5-9b-vllm.yaml"), python="/py")
    assert "\"$USERTURN_PYTHON\" -m vllm.entrypoints.cli.main serve \"$MODEL\"" in vllm
    custom = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "binary": "/opt/llama/llama-server"})
    assert "bash -c '/opt/llama/llama-server -m \"$MODEL\"" in render_slurm(custom, python="/py")


def test_llama_cpp_official_image_runs_its_own_binary() -> None:
    m = parse_manifest({"engine": "llamacpp", "model": "org/repo-GGUF:Q4_K_M",
                        "cluster": {"k8s": {"image": "ghcr.io/ggml-org/llama.cpp:server"}}})
    assert "- /app/llama-server" in render_k8s(m)
    other = parse_manifest({"engine": "llamacpp", "model": "org/repo-GGUF:Q4_K_M",
                            "cluster": {"k8s": {"image": "my/llama:1"}}})
    assert "- llama-server" in render_k8s(other)


def test_packaged_models_are_resolved_for_every_engine_that_takes_a_file(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "weights_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    for engine in ("sglang", "vllm", "llamacpp", "transformers"):
        m = parse_manifest({"engine": engine, "model": "pkg:weights_pkg/m.gguf"})
        assert engine_of(m).resolve_model(m) == str(package / "m.gguf"), engine
    missing = parse_manifest({"engine": "llamacpp", "model": "pkg:weights_pkg/none.gguf"})
    with pytest.raises(UserError, match=r"none\.gguf"):
        engine_of(missing).resolve_model(missing)


def test_launched_servers_require_a_generated_key_unless_the_manifest_opts_out() -> None:
    for engine in ("sglang", "vllm", "llamacpp"):
        assert parse_manifest({"engine": engine, "model": "m.gguf"}).api_key == "generate", engine
        assert parse_manifest({"engine": engine, "model": "m.gguf", "api_key": "none"}).api_key is None, engine
    assert load_manifest(MANIFESTS / "qwen3.5-9b.yaml").api_key == "generate"
    # no key where none can be taken: the CPU engine, an endpoint, a router, a command without {api_key}
    assert parse_manifest({"engine": "transformers", "model": "m"}).api_key is None
    assert parse_manifest({"engine": "external", "base_url": "http://h/v1", "model": "m"}).api_key is None
    assert parse_manifest({"engine": "sglang", "model": "m", "replicas": 2, "router": {}}).api_key is None
    assert parse_manifest({"engine": "sglang", "model": "m", "command": ["srv", "{port}"]}).api_key is None
    keyed = parse_manifest({"engine": "sglang", "model": "m", "command": ["srv", "{port}", "--key={api_key}"]})
    assert keyed.api_key == "generate"
    # an opted-out manifest stays opted out when dumped and read back (as `userturn train` writes it)
    opted = parse_manifest({"engine": "vllm", "model": "m", "api_key": "none"})
    assert parse_manifest(opted.model_dump(mode="json", exclude_unset=True)).api_key is None


def test_local_launches_listen_on_loopback_unless_the_manifest_asks() -> None:
    m = parse_manifest({"engine": "vllm", "model": "m"})
    argv = server_argv(m, port=1)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    wide = parse_manifest({"engine": "vllm", "model": "m", "host": "0.0.0.0"})
    assert server_argv(wide, port=1)[server_argv(wide, port=1).index("--host") + 1] == "0.0.0.0"


def test_a_new_engine_is_one_definition_and_a_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """What docs/serving.md's "Adding an engine" promises: a definition and its registry entry are all a launch, a
    SLURM script (multi-node, a CPU-only job's resources), Kubernetes YAML and the manifest checks need
    (tests/serve/test_engine_names.py: no other file names an engine)."""
    from userturn.serve.engines import EngineDefinition, LaunchArgs

    class Toy(EngineDefinition):
        kind = "toy"
        summary = "a toy server"
        image = "toy/server:1.0"
        health_paths = ("/ready",)
        multi_node = True
        cpu_only_cpus, cpu_only_mem = 3, "5G"
        traits = EXTERNAL.model_copy(update={"engine": "toy"})

        def argv(self, m: object, a: LaunchArgs) -> list[str]:
            return ["toy-server", "--port", str(a.port), "--model", a.model or "", *(["--key", a.api_key]
                                                                                      if a.api_key else [])]

    monkeypatch.setitem(ENGINES, "toy", Toy())
    m = parse_manifest({"engine": "toy", "model": "org/m", "name": "toy"})
    assert server_argv(m, port=5, model="org/m") == ["toy-server", "--port", "5", "--model", "org/m"]
    assert m.readiness_paths == ("/ready",) and m.api_key == "generate"
    assert "image: toy/server:1.0" in render_k8s(m)
    assert "bash -c 'toy-server --port \"$PORT\" --model \"$MODEL\" --key \"$USERTURN_API_KEY\"'" in render_slurm(m)
    with pytest.raises(UserError, match="tp_size is only supported by engines 'sglang' and 'vllm'"):
        parse_manifest({"engine": "toy", "model": "org/m", "tp_size": 2})
    assert resources(m) == (3, "5G")  # its CPU-only job, from its definition
    check_deployable(parse_manifest({"engine": "toy", "model": "org/m", "nnodes": 2}))  # multi-node: its flag
    with pytest.raises(UserError, match="nnodes: multi-node needs engines 'sglang' and 'toy'"):
        check_deployable(parse_manifest({"engine": "vllm", "model": "m", "nnodes": 2, "command": ["srv"]}))
    assert not Toy().traits.external and ENGINES["external"].traits.external


def test_a_results_file_of_the_embedded_engine_under_its_old_name_is_refused_in_one_line() -> None:
    """Records name the embedded engine by its kind; a file that recorded it as `cpu` reads as it is, and a resume
    onto it says which setting differs rather than mixing two configurations."""
    from userturn.core.fingerprint import (
        ConfigMismatch,
        GenerationContext,
        check_resume,
        fingerprint,
        generation_config,
    )
    from userturn.core.options import Options

    traits = ENGINES["transformers"].traits
    context = GenerationContext(model="m", dataset="d", mode="raw", perturbation="none", assistant_source="dataset",
                                engine=traits.engine, seed_honoured=traits.seed_honoured,
                                server_sampler_defaults=traits.server_sampler_defaults)
    current = generation_config(context, Options())
    old = {**current, "engine": "cpu"}
    with pytest.raises(ConfigMismatch, match=r"^out.jsonl holds records made with engine=cpu, this run has "
                                             r"engine=transformers; use another --out$"):
        check_resume({fingerprint(old): old}, current, path="out.jsonl")
