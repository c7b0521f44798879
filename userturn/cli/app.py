"""`userturn` command line: the root parser (one subparser per command module, `cli.commands`) and `main`."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any, NoReturn

from pydantic import ValidationError

from userturn.core.errors import UserError, first_error
from userturn.core.text import did_you_mean
from userturn.core.version import __version__


class DefaultsFormatter(argparse.HelpFormatter):
    """argparse's help, each option's default appended where its help does not state it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or action.required or action.default in (None, False, [], argparse.SUPPRESS)
                or "default" in text.lower() or text == argparse.SUPPRESS):
            return action.help
        return f"{text} (default: %(default)s)"  # argparse asks only for non-empty help


CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def shown_extras(extras: Sequence[str], flags: Sequence[str]) -> str:
    """Unrecognised arguments as an error shows them: each unknown flag with the closest known one, the value after
    it (or after its `=`) not shown, since an unknown flag's value may be a key (`--openai-api-key sk-...`)."""
    shown, after_flag = [], False
    for arg in extras:
        if arg.startswith("-") and len(arg) > 1:
            name, eq, _ = arg.partition("=")
            shown.append(f"{name}{'=[value not shown]' if eq else ''}{did_you_mean(name, flags)}")
            after_flag = not eq
        else:
            shown.append("[value not shown]" if after_flag else arg)
            after_flag = False
    return " ".join(shown)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the full usage is one `--help` away) with a suggestion for a
    mistyped subcommand, choice or flag, every option's default in `--help`, and no prefix matching: a flag is
    taken only as spelled in full."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        kwargs.setdefault("allow_abbrev", False)  # `--api-key sk-..` must never be taken as `--api-key-env sk-..`
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        match = CHOICE.search(message)
        if match:
            choices = [c.strip().strip("'") for c in match.group(2).split(",")]
            message += did_you_mean(match.group(1), choices)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's parse_args, an unknown flag named with the closest flag of its subcommand."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), {})
            parser = commands.get(getattr(parsed, "command", None) or "", self)
            flags = [flag for action in parser._actions for flag in action.option_strings
                     if flag.startswith("--") and action.help != argparse.SUPPRESS]  # not the refused key flags
            self.exit(2, f"{parser.prog}: error: unrecognized arguments: {shown_extras(extras, flags)} (see "
                         f"{parser.prog} --help)\n")
        return parsed

    def format_help(self) -> str:
        """argparse's help with the epilog (the examples) kept as written: indented command lines, not refilled."""
        epilog, self.epilog = self.epilog, None
        try:
            text = super().format_help()
        finally:
            self.epilog = epilog
        return text + ("\n" + epilog.rstrip() + "\n" if epilog else "")


def build_parser() -> argparse.ArgumentParser:
    """The `userturn` parser: one subparser per command module (`cli.commands.COMMANDS`), each running its `run`."""
    from userturn.cli.commands import COMMANDS
    from userturn.cli.help_text import TOP, epilog

    parser = Parser(
        prog="userturn",
        description="Measure interaction awareness: have a model write the next user turn, judge it, report.",
    )
    parser.add_argument("--version", action="version", version=f"userturn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.epilog = epilog(TOP)
    for module in COMMANDS:
        command = module.add_parser(sub)
        command.set_defaults(func=module.run)
        command.epilog = epilog(module.EXAMPLES)
        for action in command._actions:  # an option without help still states its default
            if action.help is None and action.option_strings and action.default not in (None, False, []):
                action.help = "default: %(default)s"
    return parser


class Terminated:
    """SIGTERM handled as Ctrl-C: the running command is interrupted the same way (an asyncio run cancels its main
    task, so servers stop and written records stay), then exits 143 with the resume hint."""

    received = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        cls.received = True
        on_interrupt = signal.getsignal(signal.SIGINT)
        if callable(on_interrupt):  # asyncio.Runner's (cancels the main task) or Python's default (raises)
            on_interrupt(signal.SIGINT, frame)
            return
        raise KeyboardInterrupt  # SIGINT ignored (a background job): interrupt here

    @classmethod
    def install(cls) -> None:
        cls.received = False
        with contextlib.suppress(ValueError):  # not the main thread (an embedding caller): leave SIGTERM alone
            signal.signal(signal.SIGTERM, cls.handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI. Every subcommand sets `func(args) -> int`; UserError becomes one line and an exit code; Ctrl-C
    and SIGTERM end with the resume hint (exit 130 and 143)."""
    Terminated.install()
    from userturn.cli.notices import install

    install()  # the orchestration's warnings and stage lines, shown on stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from userturn.cli.commands import by_name
        from userturn.cli.paths import check_paths

        check_paths(args, by_name(args.command).PATHS)  # every bad path: one line, exit 2, before anything runs
        from userturn.cli.key_args import check_key_flags

        check_key_flags(args)  # a bad key variable or file likewise (never echoing a key)
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that went away (`| head`) is found here, not at exit
        return status
    except BrokenPipeError:  # stop quietly, as shell tools do; Python's own flush at exit goes to /dev/null
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except UserError as exc:
        print(f"userturn: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ValidationError as exc:  # a setting that slipped past the flag checks: still one line
        print(f"userturn: error: {first_error(exc, exc.title)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        what = "terminated (SIGTERM)" if Terminated.received else "interrupted"
        print(f"userturn: {what}; {_after_stop(args)}", file=sys.stderr)
        return 143 if Terminated.received else 130
    except SystemExit as exc:  # a launched server's context turns SIGTERM/SIGHUP into SystemExit(128 + signal)
        if exc.code not in (128 + signal.SIGTERM, 128 + signal.SIGHUP):
            raise
        name = "SIGTERM" if exc.code == 128 + signal.SIGTERM else "SIGHUP"
        print(f"userturn: terminated ({name}); {_after_stop(args)}", file=sys.stderr)
        return int(exc.code)


def _after_stop(args: argparse.Namespace) -> str:
    """What a stopped command leaves (its module's `STOPPED`)."""
    from userturn.cli.commands import stopped

    return stopped(getattr(args, "command", None))


if __name__ == "__main__":
    from userturn.cli import entry

    sys.exit(entry())
