"""`userturn` command line: one entry point, subcommands registered by each package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from client import __version__
from client.errors import UserError

Registrar = Callable[[argparse._SubParsersAction], None]


def _registrars() -> list[Registrar]:
    from client.cli_experiment import register as register_experiment
    from client.cli_probe import register as register_probe
    from judges.cli import register as register_judges
    from serve.cli import register as register_serve

    return [register_probe, register_judges, register_serve, register_experiment]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="userturn",
        description="Measure interaction awareness: have a model write the next user turn, judge it, report.",
    )
    parser.add_argument("--version", action="version", version=f"userturn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI. Every subcommand sets `func(args) -> int`; UserError becomes one line and an exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"userturn: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("userturn: interrupted; completed records are kept, rerun the same command to resume",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
