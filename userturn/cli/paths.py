"""Paths named on the command line, checked before anything launches: one line and exit 2 for each bad one. Inputs
must be readable files; outputs must be writable, their missing directories are created."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from userturn.core.errors import UserError

if TYPE_CHECKING:
    from userturn.core.results_files import Judged

Named = tuple[tuple[str, str], ...]  # (attribute, the flag or argument as errors name it)


@dataclass(frozen=True)
class Paths:
    """The paths a command takes, by kind, each checked before it runs (one line, exit 2): `results` RESULTS... read
    as `Judged` says; readable input files; writable output files and folders (missing folders created); folders
    only checked (created when the run starts); `check`: what else the command checks first."""

    results: Judged | None = None
    inputs: Named = ()
    outputs: Named = ()
    output_dirs: Named = ()
    checked_dirs: Named = ()
    check: Callable[[argparse.Namespace], None] | None = None


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


def check_paths(args: argparse.Namespace, paths: Paths) -> None:
    """Check every path the parsed command names (its module's `PATHS`) before it runs."""
    if paths.results is not None and getattr(args, "results", None) is not None:
        from userturn.core.results_files import results_files

        results_files(args.results, paths.results)
    if paths.check is not None:
        paths.check(args)
    for named, check in ((paths.inputs, input_file), (paths.outputs, output_file), (paths.output_dirs, output_dir),
                         (paths.checked_dirs, functools.partial(output_dir, create=False))):
        for attr, what in named:
            if getattr(args, attr, None) is not None:
                check(getattr(args, attr), what)
