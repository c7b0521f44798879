"""Parse argvs with an engine's own startup code; run by the python of a scratch venv that has the engine.

Input (stdin, JSON): {"engine": "sglang" | "vllm", "items": [{"label": str, "argv": [...], "stop": [...]?}]}.
Output (stdout, last line, JSON): {"version": ..., "reasoning_parsers": [...], "results": [{"label", "error" or
"values", "stop_error"?}]}. Imports nothing of userturn (the scratch venv has only the engine).

- sglang: `sglang.srt.server_args.prepare_server_args(argv[3:])`, what `python -m sglang.launch_server` runs before
  it resolves the model (argparse with SGLang's choices, then `ServerArgs.__post_init__`).
- vllm: `vllm serve ...` as `vllm.entrypoints.cli.main` parses it (the top parser with the `serve` subcommand's
  `ServeSubcommand`, then its `validate`), then what `vllm serve` checks before it loads anything:
  `AsyncEngineArgs.from_cli_args`, its structured outputs config and `validate_api_server_args` (the reasoning
  parser name against vLLM's registry). With "stop", the request body {"model", "prompt", "stop"} is validated by
  vLLM's own `CompletionRequest` under this process's environment (VLLM_MAX_STOP_STRINGS).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import sys
from typing import Any


def _sglang(argv: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import prepare_server_args

    s = prepare_server_args(argv)
    keys = ("model_path", "tokenizer_path", "host", "port", "api_key", "sampling_defaults",
            "enable_deterministic_inference", "reasoning_parser", "tp_size", "dp_size", "served_model_name",
            "random_seed", "nnodes", "node_rank", "dist_init_addr", "mem_fraction_static", "context_length", "dtype",
            "trust_remote_code", "revision", "chat_template", "load_format")
    return {k: getattr(s, k) for k in keys}


def _vllm(argv: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.common.cli_args import validate_api_server_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # vllm.entrypoints.cli.main.main with its `serve` subcommand: the top parser, then the subcommand's validate
    top = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand()
    serve.subparser_init(top.add_subparsers(required=False, dest="subparser"))
    args = top.parse_args(["serve", *argv])
    serve.validate(args)
    if args.model_tag is not None:  # ServeSubcommand.cmd: the positional model wins
        args.model = args.model_tag
    AsyncEngineArgs.from_cli_args(args).create_structured_outputs_config()
    validate_api_server_args(args)  # at API server setup: the reasoning parser name against vLLM's registry
    keys = ("model", "tokenizer", "host", "port", "api_key", "generation_config", "reasoning_parser",
            "tensor_parallel_size", "data_parallel_size", "served_model_name", "seed", "gpu_memory_utilization",
            "max_model_len", "dtype", "trust_remote_code", "revision", "chat_template", "load_format")
    return {k: getattr(args, k) for k in keys}


def _vllm_stop(model: str, stop: list[str]) -> None:
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    CompletionRequest.model_validate({"model": model, "prompt": "x", "stop": stop})


def _parsers(engine: str) -> list[str]:
    if engine == "sglang":
        from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

        return sorted(REASONING_PARSER_NAMES)
    from vllm.reasoning import ReasoningParserManager

    return sorted(ReasoningParserManager.list_registered())


def main() -> int:
    job = json.load(sys.stdin)
    engine = job["engine"]
    results = []
    for item in job["items"]:
        out: dict[str, Any] = {"label": item["label"]}
        argv = item["argv"]
        # the engine's own words: after `-m sglang.launch_server`, after `serve`
        words = argv[argv.index("sglang.launch_server") + 1:] if engine == "sglang" else argv[argv.index("serve") + 1:]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                values = _sglang(words) if engine == "sglang" else _vllm(words)
            out["values"] = json.loads(json.dumps(values, default=str))
        except SystemExit as exc:  # argparse: the message went to stderr
            out["error"] = f"exit {exc.code}: {err.getvalue().strip().splitlines()[-1:]}"
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
        if "stop" in item and engine == "vllm":
            try:
                _vllm_stop(words[0], item["stop"])
            except Exception as exc:
                out["stop_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[:3]}"
        results.append(out)
    print(json.dumps({"version": importlib.metadata.version(engine), "reasoning_parsers": _parsers(engine),
                      "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
