"""Helpers the sbatch script runs inside the job: `python -m userturn.serve.slurm_job resolve-model ...`.

`resolve-model` prints shell `export` lines (MODEL, SERVED, SMOKE) for the CPU engine: a local dir as is, a hub id
downloaded (or taken from the cache), and with `--fallback tiny-random` the tiny random model when the hub is
unreachable, served under the smoke name so its noise is never recorded under the real model's name.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from userturn.errors import UserError


def resolve_model_exports(model: str, served: str, fallback: str, revision: str | None = None) -> str:
    """The `export MODEL=... SERVED=... SMOKE=0|1` line for the CPU engine's model."""
    from userturn.serve.launcher import SMOKE_MODEL_NAME, resolve_cpu_model
    from userturn.serve.manifest import Manifest

    m = Manifest(engine="transformers", model=model, revision=revision, served_model_name=served,
                 fallback=fallback)  # type: ignore[arg-type]
    path, smoke = resolve_cpu_model(m, lambda msg: print(f"userturn: {msg}", file=sys.stderr, flush=True))
    if smoke and path != model:
        served = SMOKE_MODEL_NAME
    return f"export MODEL={shlex.quote(path)} SERVED={shlex.quote(served)} SMOKE={int(smoke)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m userturn.serve.slurm_job")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve-model", help="print MODEL/SERVED/SMOKE exports for the CPU engine")
    r.add_argument("--model", required=True)
    r.add_argument("--served-model-name", required=True)
    r.add_argument("--fallback", choices=["none", "tiny-random"], default="none")
    r.add_argument("--revision", default=None)
    args = parser.parse_args(argv)
    try:
        print(resolve_model_exports(args.model, args.served_model_name, args.fallback, args.revision))
    except UserError as exc:
        print(f"userturn: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
