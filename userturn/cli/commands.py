"""The commands of `userturn`, in the order `--help` lists them. A command is one module of `userturn/cli/` that
exports `NAME` (as typed), `add_parser(sub) -> ArgumentParser` (its parser, on the subparsers of `userturn`),
`run(args) -> int` (the exit status), `EXAMPLES` (the end of its `--help`), `PATHS` (`cli.paths.Paths`: the paths it
takes, checked before it runs) and, optionally, `STOPPED` (what a command stopped by Ctrl-C or SIGTERM leaves,
default `RESUMES`). Adding a command is its module and its line here."""

from __future__ import annotations

from types import ModuleType

from userturn.cli import (
    compact,
    export,
    judge,
    judge_eval,
    label,
    posttrain,
    probe,
    report,
    rerank,
    run,
    serve,
    show,
    train,
)
from userturn.cli import list as list_command

COMMANDS: tuple[ModuleType, ...] = (
    probe,
    judge,
    report,
    judge_eval,
    label,
    serve,
    run,
    export,
    show,
    compact,
    rerank,
    list_command,
    train,
    posttrain,
)
RESUMES = "completed records are kept, rerun the same command to resume"
REQUIRED = ("NAME", "add_parser", "run", "EXAMPLES", "PATHS")


def by_name(name: str) -> ModuleType:
    """The module of command `name`."""
    return next(module for module in COMMANDS if name == module.NAME)


def stopped(name: str | None) -> str:
    """What a stopped command leaves (its module's `STOPPED`, else `RESUMES`)."""
    module = next((m for m in COMMANDS if name == m.NAME), None)
    return str(getattr(module, "STOPPED", RESUMES))
