"""The command-line reference, docs/cli.md, rendered from the parsers themselves: every subcommand's flags (name,
value, default, help) in the groups its `--help` shows, so the reference cannot drift from the code.
tests/cli/test_cli_reference.py fails when the committed file differs. Regenerate with
`python -m userturn.cli.reference` (writes docs/cli.md of this checkout, or the path given)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
REGENERATE = "python -m userturn.cli.reference"
HEADER = f"""\
# Command-line reference

Generated from the parsers by `{REGENERATE}`; do not edit by hand (tests/cli/test_cli_reference.py fails when this
file differs from what the parsers say). Every command also prints this with `userturn COMMAND --help`, its
examples at the end. A flag is taken only as spelled in full; a repeatable flag (`append`) is given once per value.
"""


def _cell(text: str) -> str:
    """One table cell: whitespace collapsed, `|` escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def _value(action: argparse.Action) -> str:
    """The value a flag takes as `--help` shows it (`N`, `{raw,chat}`, `[X ...]`); '' for a switch."""
    if action.nargs == 0:
        return ""
    formatter = argparse.HelpFormatter("userturn")
    default = action.dest if not action.option_strings else action.dest.upper()
    return formatter._format_args(action, default)


def _default(action: argparse.Action) -> str:
    """The default `--help` appends (the same rule as `DefaultsFormatter`), '' where there is none to state."""
    if (not action.option_strings or action.required or isinstance(action.default, bool)
            or action.default in (None, [], argparse.SUPPRESS)):
        return ""
    return f"`{action.default}`"


def _help(action: argparse.Action) -> str:
    """The help text with argparse's `%(default)s`-style fields filled in, without the appended default."""
    return argparse.HelpFormatter("userturn")._expand_help(action) if action.help else ""


def _names(action: argparse.Action) -> str:
    return ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar or action.dest}`"


def _group(title: str, actions: Sequence[argparse.Action]) -> list[str]:
    lines = [f"**{title}**", "", "| argument | value | default | meaning |", "|---|---|---|---|"]
    for action in actions:
        value = _value(action)
        lines.append(f"| {_names(action)} | {f'`{_cell(value)}`' if value else ''} | {_cell(_default(action))} "
                     f"| {_cell(_help(action))} |")
    return [*lines, ""]


def _shown(action: argparse.Action) -> bool:
    """Whether `--help` lists the action: not `-h`, not a suppressed flag (the refused key flags)."""
    return action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    sentence = summary[:1].upper() + summary[1:] + ("" if summary.endswith((".", "?", ")")) else ".")
    lines = [f"## `userturn {name}`", "", sentence, ""]
    for group in parser._action_groups:
        actions = [action for action in group._group_actions if _shown(action)]
        if actions:
            lines += _group(group.title or "options", actions)
    if parser.epilog:
        lines += ["```text", parser.epilog.rstrip(), "```", ""]
    return lines


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """docs/cli.md for `parser` (default: `userturn`'s own): the command list, then each command's arguments."""
    if parser is None:
        from userturn.cli.app import build_parser

        parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#userturn-{name}) | {_cell(summaries.get(name, ''))} |" for name in sub.choices]
    lines += ["", "`userturn --version` prints the version.", ""]
    for name, command in sub.choices.items():
        lines += _command(name, summaries.get(name, ""), command)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the reference to the path given (default: docs/cli.md of this checkout)."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[0]) if args else DOC
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
