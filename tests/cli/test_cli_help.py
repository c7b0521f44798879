"""Every command's --help ends with examples, each example parses with the real parser, no `%%` anywhere."""

from __future__ import annotations

import argparse
import shlex

import pytest

from userturn.cli import build_parser
from userturn.cli.commands import COMMANDS
from userturn.cli.help_text import TOP

EXAMPLES = {module.NAME: module.EXAMPLES for module in COMMANDS}


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def example_lines(text: str) -> list[str]:
    """Command lines of an examples block (a trailing backslash continues a line)."""
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if current:
            current += " " + line.rstrip("\\").strip()
        elif line.startswith("userturn "):
            current = line.rstrip("\\").strip()
        if current and not line.endswith("\\"):
            lines.append(current)
            current = ""
    return lines


def test_every_command_has_examples() -> None:
    assert set(commands()) == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_help_shows_examples_without_percent_escapes(name: str) -> None:
    text = commands()[name].format_help()
    assert "\nexamples:\n" in text and f"\n  userturn {name}" in "\n" + text.split("\nexamples:\n")[1], text
    assert "%%" not in text


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_parses(name: str) -> None:
    lines = example_lines(EXAMPLES[name])
    assert lines
    for line in lines:
        argv = shlex.split(line)[1:]
        assert argv[0] == name
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # pragma: no cover - the message is what matters
            pytest.fail(f"example does not parse ({exc.code}): {line}")
        assert args.command == name


def test_report_help_prints_the_percent_sign(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["report", "--help"])
    out = capsys.readouterr().out
    assert "95% interval" in out and "%%" not in out and "--wide" in out


def test_top_level_help_has_examples_that_parse() -> None:
    text = build_parser().format_help()
    assert "\nexamples:\n  userturn run smoke" in text
    for line in example_lines(TOP):
        argv = shlex.split(line.split("#")[0])[1:]
        assert build_parser().parse_args(argv).command == argv[0]


def test_building_the_parser_imports_no_command_implementation() -> None:
    """Start-up is paid by every command (and per request in a short probe): the parser alone stays light."""
    import subprocess
    import sys

    code = ("import sys; from userturn.cli import build_parser; build_parser(); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('userturn.', 'yaml', 'trl', 'peft')))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                 .stdout.split())
    heavy = {"userturn.orchestrate.training_run", "userturn.client.train.trainer", "userturn.client.train.data",
             "userturn.orchestrate.posttrain", "userturn.core.jsonl", "userturn.core.records", "trl", "peft"}
    assert not loaded & heavy, loaded & heavy
