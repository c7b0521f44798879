"""`python -m userturn.serve.slurm_job resolve-model ...`, run inside the sbatch script: prints `export MODEL=...
SERVED=...`, the model resolved by its engine in the job's own environment (`launcher.resolve_model`: a `pkg:` file,
the CPU engine's hub snapshot); a model that cannot be had is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from userturn.core.errors import UserError


def resolve_model_exports(engine: str, model: str, served: str, revision: str | None = None) -> str:
    """The `export MODEL=... SERVED=...` line for `engine`'s model."""
    from userturn.serve.launcher import resolve_model
    from userturn.serve.manifest import Manifest

    m = Manifest(engine=engine, model=model, revision=revision, served_model_name=served)
    return f"export MODEL={shlex.quote(resolve_model(m) or model)} SERVED={shlex.quote(served)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m userturn.serve.slurm_job")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve-model", help="print MODEL/SERVED exports for an engine's model")
    r.add_argument("--engine", required=True)
    r.add_argument("--model", required=True)
    r.add_argument("--served-model-name", required=True)
    r.add_argument("--revision", default=None)
    args = parser.parse_args(argv)
    try:
        print(resolve_model_exports(args.engine, args.model, args.served_model_name, args.revision))
    except UserError as exc:
        print(f"userturn: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
