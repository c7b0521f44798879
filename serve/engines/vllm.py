"""vLLM (`vllm serve MODEL`), flags as in vLLM 0.33.0's engine/arg_utils.py and entrypoints' cli_args."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar

from userturn.core.engine_traits import EngineTraits
from userturn.core.errors import UserError
from userturn.serve.engines.base import EngineDefinition, LaunchArgs, flag_args, key_flag

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest

BINARY = "vllm"  # the console script; in a SLURM job: "$USERTURN_PYTHON" -m vllm.entrypoints.cli.main
CLI_MODULE = "vllm.entrypoints.cli.main"
VERSION = "0.33.0"
# vllm/reasoning/__init__.py _REASONING_PARSERS_TO_REGISTER (0.33.0): gpt-oss is `openai_gptoss` here
REASONING_PARSERS = frozenset({
    "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41", "poolside_v1", "cohere_command3", "cohere_command4",
    "ernie45", "gemma4", "glm45", "glm47", "ling3", "openai_gptoss", "granite", "granite_thinking_parser", "hf",
    "beam", "holo2", "hunyuan_a13b", "hy_v3", "hy_v4", "kimi_k2", "kimi_k3", "k2_horizon", "mimo", "minicpmv",
    "minimax_m2", "minimax_m2_append_think", "minimax_m3", "mistral", "nemotron_v3", "olmo3", "plamo3", "muse",
    "muse_glimmer", "musespark1x", "qwen3", "seed_oss", "step3", "step3p5", "step5", "inkling"})
MAX_STOP_STRINGS_ENV = "VLLM_MAX_STOP_STRINGS"  # vllm/envs.py: default 4; more strings in one request are a 400
DEFAULT_MAX_STOP_STRINGS = 4

TRAITS = EngineTraits(
    engine="vllm", seed_honoured=True,
    server_sampler_defaults={},  # launched with --generation-config vllm (default 'auto': generation_config.json)
    neutral_sampler={"top_p": 1.0, "top_k": -1, "min_p": 0.0},
    max_stop_strings=DEFAULT_MAX_STOP_STRINGS, honours_stop_token_ids=True, stop_reason_field="stop_reason",
    reasoning_field="reasoning",  # the served weights: /v1/models `root` (the model path it loaded)
    identity_route="/version",  # {"version": ...} (a bare URL's server is recognised)
)


class VLLM(EngineDefinition):
    kind = "vllm"
    summary = "vLLM on GPUs (one node, tp x dp)"
    startup_timeout_s = 1800.0
    uses_gpus = parallel = True
    image = f"vllm/vllm-openai:v{VERSION}"
    reasoning_parsers = REASONING_PARSERS
    parser_aliases: ClassVar[dict[str, str]] = {"gpt-oss": "openai_gptoss", "qwen3-thinking": "qwen3",
                                                "minimax-append-think": "minimax_m2_append_think"}
    sampler_flags = ("--generation-config", "--override-generation-config")
    traits = TRAITS

    def engine_traits(self, m: Manifest) -> EngineTraits:
        traits = super().engine_traits(m)
        limit = m.env.get(MAX_STOP_STRINGS_ENV)
        return traits.model_copy(update={"max_stop_strings": int(limit)}) if limit and limit.isdigit() else traits

    def check(self, m: Manifest) -> None:
        super().check(m)
        if m.probe.send_stop_token_ids is None:
            m.probe.send_stop_token_ids = True  # vLLM honours stop_token_ids on raw /v1/completions
        limit = m.env.get(MAX_STOP_STRINGS_ENV)
        if limit is not None and not limit.isdigit():
            raise ValueError(f"env.{MAX_STOP_STRINGS_ENV}: {limit!r} is not a whole number")

    def argv(self, m: Manifest, a: LaunchArgs) -> list[str]:
        """`--generation-config vllm`: sampling settings a request leaves out take vLLM's neutral defaults, not the
        model's generation_config.json; extra_args can say otherwise (then the traits say the defaults are
        unknown)."""
        exe = [m.binary] if m.binary else [a.python, "-m", CLI_MODULE] if a.target == "slurm" else [BINARY]
        return [*exe, "serve", a.model or m.resolve_path(m.model) or "", *flag_args(
            ("--tokenizer", m.resolve_path(m.tokenizer)), ("--revision", m.revision), ("--host", a.host or m.host),
            ("--port", a.port), ("--tensor-parallel-size", m.tp_size), ("--data-parallel-size", m.dp_size),
            ("--gpu-memory-utilization", m.mem_fraction_static), ("--max-model-len", m.context_length),
            ("--dtype", m.dtype), ("--seed", m.seed), ("--chat-template", m.resolve_path(m.chat_template)),
            ("--reasoning-parser", m.reasoning_parser), ("--trust-remote-code", m.trust_remote_code),
            ("--load-format", m.load_format), ("--generation-config", "vllm"),
            ("--served-model-name", m.request_model_name)), *key_flag("--api-key", a.api_key), *m.extra_args]

    def installed(self, m: Manifest) -> None:
        import shutil

        exe = m.binary or BINARY
        if shutil.which(exe) is None and not os.path.isfile(exe):
            raise UserError(f"engine 'vllm' needs the `{exe}` command on PATH: pip install vllm (on a CUDA machine)")


ENGINE = VLLM()
