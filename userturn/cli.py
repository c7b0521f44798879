"""`userturn` command line: one entry point, subcommands registered by each package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from pydantic import ValidationError

from userturn import __version__
from userturn.errors import UserError, first_error

Registrar = Callable[[argparse._SubParsersAction], None]


def _registrars() -> list[Registrar]:
    from userturn.cli_experiment import register as register_experiment
    from userturn.cli_list import register as register_list
    from userturn.cli_probe import register as register_probe
    from userturn.cli_train import register as register_train
    from userturn.judges.cli import register as register_judges
    from userturn.serve.cli import register as register_serve

    return [register_probe, register_judges, register_serve, register_experiment, register_list, register_train]


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the full usage is one `--help` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        """argparse's help with the epilog (the examples) kept as written: indented command lines, not refilled."""
        epilog, self.epilog = self.epilog, None
        try:
            text = super().format_help()
        finally:
            self.epilog = epilog
        return text + ("\n" + epilog.rstrip() + "\n" if epilog else "")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="userturn",
        description="Measure interaction awareness: have a model write the next user turn, judge it, report.",
    )
    parser.add_argument("--version", action="version", version=f"userturn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _registrars():
        register(sub)
    from userturn.client.help_text import epilog

    parser.epilog = epilog(None)
    for name, command in sub.choices.items():
        command.epilog = epilog(name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI. Every subcommand sets `func(args) -> int`; UserError becomes one line and an exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from userturn.client.paths import check_paths

        check_paths(args)  # every bad path is one line and exit 2, before anything loads or launches
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"userturn: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ValidationError as exc:  # a setting that slipped past the flag checks: still one line
        print(f"userturn: error: {first_error(exc, exc.title)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("userturn: interrupted; completed records are kept, rerun the same command to resume",
              file=sys.stderr)
        return 130


def entry() -> int:
    """The `userturn` console script."""
    return main()


if __name__ == "__main__":
    sys.exit(entry())
