"""SGLang (`python -m sglang.launch_server`), flags as in sglang 0.5.23's server_args (sglang/srt/arg_groups)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from userturn.core.engine_traits import EngineTraits
from userturn.core.errors import UserError
from userturn.serve.engines.base import EngineDefinition, LaunchArgs, flag_args, key_flag

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest

MODULE = "sglang.launch_server"
VERSION = "0.5.23"
# sglang/srt/parser/reasoning_parser_names.py (0.5.23)
REASONING_PARSERS = frozenset({
    "apertus2509", "beam", "deepseek-r1", "deepseek-v3", "deepseek-v4", "deepseek-v41", "dots", "glm45", "ling3",
    "hunyuan", "gpt-oss", "k2_horizon", "kimi", "kimi_k2", "kimi_k3", "mimo", "muse", "poolside_v1", "qwen3",
    "qwen3-thinking", "minimax", "minimax-append-think", "minimax-m3", "nanbeige", "step3", "step3p5", "mistral",
    "nemotron_3", "granite_thinking_parser", "interns1", "gemma4", "inkling", "iquest_q1", "cohere_command4",
    "gigachat35", "response_template"})
# Where the server says which weights it loaded: GET /model_info -> {"model_path": ...} (its /v1/models `root` is
# the served name, not the weights).
WEIGHTS_ROUTE = "/model_info"

TRAITS = EngineTraits(
    engine="sglang",
    seed_honoured=False,  # a request's seed reaches the sampler only under --enable-deterministic-inference
    server_sampler_defaults={},  # launched with --sampling-defaults openai (default 'model': generation_config.json)
    neutral_sampler={"top_p": 1.0, "top_k": -1, "min_p": 0.0},
    max_stop_strings=None, honours_stop_token_ids=True, stop_reason_field="matched_stop",
    reasoning_field="reasoning_content", weights_route=WEIGHTS_ROUTE,
    identity_route="/get_server_info",  # its server arguments and version (a bare URL's server is recognised)
)


class SGLang(EngineDefinition):
    kind = "sglang"
    summary = "SGLang on GPUs (tp/dp, multi-node, sglang-router)"
    startup_timeout_s = 1800.0
    health_paths = ("/health_generate", "/v1/models")
    uses_gpus = parallel = multi_node = has_router = serves_checkpoint = True
    image = f"lmsysorg/sglang:v{VERSION}"
    reasoning_parsers = REASONING_PARSERS
    parser_aliases: ClassVar[dict[str, str]] = {"openai_gptoss": "gpt-oss",
                                                "minimax_m2_append_think": "minimax-append-think"}
    sampler_flags = ("--sampling-defaults",)
    traits = TRAITS

    def deterministic_flags(self) -> list[str]:
        return ["--enable-deterministic-inference"]

    def engine_traits(self, m: Manifest) -> EngineTraits:
        traits = super().engine_traits(m)
        deterministic = m.deterministic or "--enable-deterministic-inference" in m.extra_args
        return traits.model_copy(update={"seed_honoured": True}) if deterministic and not m.command else traits

    def argv(self, m: Manifest, a: LaunchArgs) -> list[str]:
        argv = [a.python, "-m", MODULE, *flag_args(
            ("--model-path", a.model or m.resolve_path(m.model) or ""),
            ("--tokenizer-path", m.resolve_path(m.tokenizer)), ("--revision", m.revision),
            ("--host", a.host or m.host), ("--port", a.port), ("--tp-size", m.tp_size), ("--dp-size", m.dp_size),
            ("--mem-fraction-static", m.mem_fraction_static), ("--context-length", m.context_length),
            ("--dtype", m.dtype), ("--random-seed", m.seed), ("--chat-template", m.resolve_path(m.chat_template)),
            ("--reasoning-parser", m.reasoning_parser), ("--trust-remote-code", m.trust_remote_code),
            ("--load-format", m.load_format))]
        if m.nnodes > 1:
            addr = a.dist_init_addr or m.dist_init_addr
            if addr is None:
                raise UserError(f"{m.source or 'manifest'}: dist_init_addr: needed when nnodes > 1 (host:port of "
                                "node 0)")
            argv += ["--nnodes", str(m.nnodes), "--node-rank", str(0 if a.node_rank is None else a.node_rank),
                     "--dist-init-addr", addr]
        argv += ["--sampling-defaults", "openai", *(self.deterministic_flags() if m.deterministic else []),
                 "--served-model-name", m.request_model_name, *key_flag("--api-key", a.api_key)]
        return argv + list(m.extra_args)

    def installed(self, m: Manifest) -> None:
        import importlib.util

        if importlib.util.find_spec("sglang") is None:
            raise UserError("engine 'sglang' is not installed: pip install 'userturn[sglang]' (on a CUDA machine)")
        if m.router is not None and importlib.util.find_spec("sglang_router") is None:
            raise UserError("router 'sglang' is not installed: pip install sglang-router")


ENGINE = SGLang()
