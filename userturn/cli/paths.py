"""Paths named on the command line, checked before anything launches: one line and exit 2 for each bad one. Inputs
must be readable files; outputs must be writable, their missing directories are created."""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path

from userturn.cli.results_args import COMMANDS as RESULTS_COMMANDS
from userturn.cli.results_args import judge_out_is_folder
from userturn.core.errors import UserError

# per command: (attribute, flag as the user typed it)
INPUT_FILES: dict[str, list[tuple[str, str]]] = {  # RESULTS (files or folders): cli.results_args
    "judge-eval": [("gold", "gold file")], "probe": [("chat_template", "--chat-template")],
}
OUTPUT_FILES: dict[str, list[tuple[str, str]]] = {  # judge's --out: a file, or a folder for several inputs
    "probe": [("out", "--out")], "export": [("out", "--out")],
    "judge-eval": [("out", "--out")], "report": [("html", "--html")], "serve": [("out", "--out")],
}
OUTPUT_DIRS: dict[str, list[tuple[str, str]]] = {"report": [("plots", "--plots")]}
CHECKED_DIRS: dict[str, list[tuple[str, str]]] = {"run": [("out_dir", "--out-dir")]}  # created when the run starts


def input_file(path: str | Path, what: str) -> None:
    """`path` is a readable file, else a UserError naming it and what is wrong."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{what} not found: {p}")
    if p.is_dir():
        raise UserError(f"{what} {p}: is a directory, not a file")
    if not os.access(p, os.R_OK):
        raise UserError(f"{what} {p}: cannot read it (permission denied)")


def _make_dir(d: Path, what: str, create: bool = True) -> None:
    """Refuse a file on the way to `d`; with `create`, make `d` and check it can be written in."""
    for parent in (d, *d.parents):
        if parent.exists() and not parent.is_dir():
            raise UserError(f"{what}: cannot write there: {parent} is a file, not a directory")
    if not create:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what}: cannot create directory {d}: {exc.strerror}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise UserError(f"{what}: cannot write in {d} (permission denied)")


def output_file(path: str | Path, what: str) -> None:
    """`path` is a file that can be written (missing parents are created), else a UserError naming it."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{what} {p}: is a directory; name a file")
    _make_dir(p.parent if str(p.parent) else Path("."), f"{what} {p}")
    if p.exists() and not os.access(p, os.W_OK):
        raise UserError(f"{what} {p}: cannot write it (permission denied)")


def output_dir(path: str | Path, what: str, *, create: bool = True) -> None:
    """`path` as a directory that exists (created if missing) and can be written, else a UserError. Without
    `create`, only what is already there is checked (nothing on the way is a file)."""
    p = Path(path)
    _make_dir(p, f"{what} {p}", create)


def check_paths(args: argparse.Namespace) -> None:
    """Check every path flag of the parsed command (see the tables above) before it runs."""
    command = str(getattr(args, "command", ""))
    if command in RESULTS_COMMANDS and getattr(args, "results", None) is not None:
        from userturn.core.results_files import results_files

        results_files(args.results, RESULTS_COMMANDS[command])
        if command == "judge" and args.out is not None:
            (output_dir if judge_out_is_folder(args.results) else output_file)(args.out, "--out")
        if command == "export" and getattr(args, "format", None) == "inspect":
            if args.out is None:
                raise UserError("--format inspect writes one log per configuration: name a folder with --out DIR")
            output_dir(args.out, "--out")
            return
    dataset = getattr(args, "dataset", None) if command == "probe" else None
    if isinstance(dataset, str) and Path(dataset).is_dir():  # a built-in name is no path: only a directory is wrong
        raise UserError(f"--dataset {dataset}: is a directory; name a JSONL file or a built-in dataset")
    for table, check in ((INPUT_FILES, input_file), (OUTPUT_FILES, output_file), (OUTPUT_DIRS, output_dir),
                         (CHECKED_DIRS, functools.partial(output_dir, create=False))):
        for attr, what in table.get(command, []):
            if getattr(args, attr, None) is not None:
                check(getattr(args, attr), what)
