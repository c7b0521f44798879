"""`python -m userturn.serve.slurm_job resolve-model ...`, run inside the sbatch script: prints `export MODEL=...
SERVED=...` for the CPU engine, the model resolved in the job's own environment (`launcher.resolve_cpu_model`); a
model that cannot be had is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from userturn.core.errors import UserError


def resolve_model_exports(model: str, served: str, revision: str | None = None) -> str:
    """The `export MODEL=... SERVED=...` line for the CPU engine's model."""
    from userturn.serve.launcher import resolve_cpu_model
    from userturn.serve.manifest import Manifest

    m = Manifest(engine="transformers", model=model, revision=revision, served_model_name=served)
    return f"export MODEL={shlex.quote(resolve_cpu_model(m))} SERVED={shlex.quote(served)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m userturn.serve.slurm_job")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve-model", help="print MODEL/SERVED exports for the CPU engine")
    r.add_argument("--model", required=True)
    r.add_argument("--served-model-name", required=True)
    r.add_argument("--revision", default=None)
    args = parser.parse_args(argv)
    try:
        print(resolve_model_exports(args.model, args.served_model_name, args.revision))
    except UserError as exc:
        print(f"userturn: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
