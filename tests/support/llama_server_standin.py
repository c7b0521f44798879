"""A stand-in for llama.cpp's `llama-server` (no C++ build in CI): it parses its argv with llama.cpp's own flag
spellings (common/arg.cpp; an unknown flag or a missing value exits 1, as llama-server does), refuses what a CPU
launch must not carry, writes the parsed argv to $STANDIN_ARGV as JSON, then serves the OpenAI routes and /health
with tests/support/loopback_server.py under the `--alias` name (and `--api-key`, when given), and `GET /props` as
llama-server reports its parsed flags there (tools/server/server-context.cpp get_res_props: the sampler defaults
under default_generation_settings.params, `total_slots` from --parallel, whose -1 means 4: tools/server/server.cpp).
$STANDIN_BODIES, when set, names a file each generation request's body is appended to."""

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


def props(args: argparse.Namespace) -> dict[str, object]:
    """What llama-server's GET /props reports for these flags (the fields userturn reads)."""
    params = {"top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p, "xtc_probability": args.xtc_probability,
              "typical_p": 1.0, "top_n_sigma": -1.0, "repeat_penalty": args.repeat_penalty, "presence_penalty": 0.0,
              "frequency_penalty": 0.0, "dry_multiplier": 0.0, "mirostat": args.mirostat, "seed": args.seed or -1,
              "n_predict": -1}
    return {"default_generation_settings": {"params": params, "n_ctx": args.ctx_size or 4096},
            "total_slots": 4 if args.parallel < 0 else args.parallel, "model_path": args.model or args.hf_repo,
            "model_alias": args.alias, "build_info": "b0000-standin"}


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
            "--model", args.alias or args.model or args.hf_repo, "--props", json.dumps(props(args))]
    if os.environ.get("STANDIN_BODIES"):
        argv.append(f"--log-bodies={os.environ['STANDIN_BODIES']}")
    if args.api_key:
        argv.append(f"--api-key={args.api_key}")
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
