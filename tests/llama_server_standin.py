"""A stand-in for llama.cpp's `llama-server` (no C++ build in CI): it parses its argv with llama.cpp's own flag
spellings (common/arg.cpp; an unknown flag or a missing value exits 1, as llama-server does), refuses what a CPU
launch must not carry, writes the parsed argv to $STANDIN_ARGV as JSON, then serves the OpenAI routes and /health
with tests/loopback_server.py under the `--alias` name (and `--api-key`, when given)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llama-server", allow_abbrev=False)
    p.add_argument("-m", "--model")
    p.add_argument("-hf", "--hf-repo")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("-a", "--alias")
    p.add_argument("--jinja", action="store_true")
    p.add_argument("-sp", "--special", action="store_true")
    p.add_argument("-c", "--ctx-size", type=int)
    p.add_argument("-s", "--seed", type=int)
    p.add_argument("--chat-template-file")
    p.add_argument("-np", "--parallel", type=int, default=-1)
    p.add_argument("-kvu", "--kv-unified", action="store_true")
    p.add_argument("-t", "--threads", type=int)
    p.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="n_gpu_layers", type=int)
    p.add_argument("--api-key")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--xtc-probability", type=float, default=0.0)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--mirostat", type=int, default=0)
    p.add_argument("--cache-prompt", dest="cache_prompt", action="store_true", default=True)
    p.add_argument("--no-cache-prompt", dest="cache_prompt", action="store_false")
    return p


def main() -> None:
    words = sys.argv[1:]
    for i, word in enumerate(words[:-1]):  # llama.cpp takes the next word as the key, even one starting with '-'
        if word == "--api-key":
            words[i:i + 2] = [f"--api-key={words[i + 1]}", ""]
    args = parser().parse_args([w for w in words if w])
    if args.model and not Path(args.model).is_file():
        sys.exit(f"llama-server: model file not found: {args.model}")
    out = os.environ.get("STANDIN_ARGV")
    if out:
        Path(out).write_text(json.dumps({"argv": sys.argv[1:], "parsed": vars(args)}))
    argv = [sys.executable, str(HERE / "loopback_server.py"), "--host", args.host, "--port", str(args.port),
            "--model", args.alias or args.model or args.hf_repo]
    if args.api_key:
        argv.append(f"--api-key={args.api_key}")
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
