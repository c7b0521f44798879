"""A stand-in for `python -m sglang.launch_server` (put tests/standins first on PYTHONPATH): it parses its argv
with SGLang's flag spellings (sglang 0.5.23 server_args; an unknown flag or a missing value exits 2, as SGLang's
argparse does), refuses what SGLang would refuse of userturn's launch (no --api-key, an unknown reasoning parser or
sampling-defaults value), appends the parsed argv as one JSON line to $STANDIN_LAUNCHES when set, then serves the
OpenAI routes, /health, /health_generate and /model_info with tests/support/loopback_server.py (`--sglang`: SGLang's
`matched_stop`) under the `--served-model-name`, requiring the `--api-key`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

LOOPBACK = Path(__file__).resolve().parents[2] / "support" / "loopback_server.py"
REASONING_PARSERS = ("qwen3", "gpt-oss", "glm45", "deepseek-r1")  # the ones the shipped manifests use, and one more


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
    p.add_argument("--model-path", required=True)
    p.add_argument("--tokenizer-path")
    p.add_argument("--revision")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--context-length", type=int)
    p.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--random-seed", type=int)
    p.add_argument("--chat-template")
    p.add_argument("--reasoning-parser", choices=REASONING_PARSERS)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--load-format", default="auto")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr")
    p.add_argument("--sampling-defaults", default="model", choices=["openai", "model"])
    p.add_argument("--enable-deterministic-inference", action="store_true")
    p.add_argument("--served-model-name")
    p.add_argument("--api-key")
    return p


def main() -> None:
    args = parser().parse_args()
    if not args.api_key:
        sys.exit("sglang stand-in: launched without --api-key (userturn gives every launched server one)")
    if args.nnodes > 1:
        sys.exit("sglang stand-in: one node only")
    log = os.environ.get("STANDIN_LAUNCHES")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"argv": sys.argv[1:], "parsed": vars(args)}) + "\n")
    argv = [sys.executable, str(LOOPBACK), "--host", args.host, "--port", str(args.port), "--sglang",
            "--model", args.served_model_name or args.model_path, "--model-path", args.model_path,
            f"--api-key={args.api_key}"]
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
