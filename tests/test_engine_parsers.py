"""Every emitted argv parses with the engine's own argument parser (SGLang's ServerArgs, vLLM's `serve` parser).

Skipped unless the engines import, which they do not in CI (each pulls its CUDA kernel packages). To run them, in a
scratch environment on a machine that can install the engines:

    python -m venv /tmp/parsers && /tmp/parsers/bin/pip install -e '.[test]' sglang==0.5.23 vllm==0.33.0
    /tmp/parsers/bin/python -m pytest -m engine_parsers tests/test_engine_parsers.py
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest
from userturn.serve.commands import server_argv
from userturn.serve.manifest import Manifest, load_manifest, parse_manifest

pytestmark = pytest.mark.engine_parsers
MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
KEY = "-Zq3_generated"  # a generated key that starts with '-'


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def manifests(engine: str, *constructed: dict) -> list[Manifest]:
    shipped = [m for m in map(load_manifest, sorted(MANIFESTS.glob("*.yaml"))) if m.engine == engine and not m.command]
    return shipped + [parse_manifest({"engine": engine, **data}) for data in constructed]


@pytest.mark.skipif(not _installed("sglang"), reason="sglang is not installed (see the module docstring)")
def test_sglang_argv_parses_with_server_args() -> None:
    from sglang.srt.server_args import ServerArgs

    for m in manifests("sglang", {"model": "m", "deterministic": True, "api_key": "generate"},
                       {"model": "m", "nnodes": 2, "tp_size": 2, "dist_init_addr": "10.0.0.1:5000"}):
        parser = argparse.ArgumentParser(allow_abbrev=False)
        ServerArgs.add_cli_args(parser)
        argv = server_argv(m, port=30000, python="python", api_key=KEY if m.api_key else None, node_rank=0)
        args = parser.parse_args(argv[3:])
        assert args.sampling_defaults == "openai", m.label
        assert args.api_key == (KEY if m.api_key else None), m.label
        assert args.enable_deterministic_inference is m.deterministic, m.label


@pytest.mark.skipif(not _installed("vllm"), reason="vllm is not installed (see the module docstring)")
def test_vllm_argv_parses_with_the_serve_parser() -> None:
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    glm = ["<|user|>", "<|assistant|>", "<|observation|>", "<|system|>", "<|endoftext|>"]
    for m in manifests("vllm", {"model": "openai/gpt-oss-20b", "reasoning_parser": "openai_gptoss"},
                       {"model": "zai-org/GLM-4.5-Air", "reasoning_parser": "glm45",
                        "env": {"VLLM_MAX_STOP_STRINGS": "5"}, "probe": {"stop": glm}}):
        argv = server_argv(m, port=8000, api_key=KEY if m.api_key else None)
        assert argv[1] == "serve"
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", argv[2], *argv[3:]])
        assert args.generation_config == "vllm", m.label
        assert args.api_key in ([KEY], KEY) if m.api_key else args.api_key is None, m.label
        assert args.reasoning_parser == m.reasoning_parser, m.label
