"""Several results files read as one: the files and folders a command names, and their records.

A folder stands for its `*.jsonl` files in name order (not subfolders, not hidden files). Several files count
exactly as their concatenation in the order named. A folder may hold a file and its judged copy
(`RESULTS.judged.jsonl`): readers of records (`prefer_judged`) read the copy in place of its source; `judge` itself
(`skip_judged`) reads only files that are not judged copies.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from userturn.core.errors import UserError
from userturn.core.jsonl import ReadReport, read_configs, read_records_into
from userturn.core.records import ConfigLine, ProbeRecord

JUDGED_SUFFIX = ".judged.jsonl"
Judged = Literal["prefer_judged", "skip_judged", "all"]
PathLike = str | Path


def judged_name(results: Path) -> Path:
    """RESULTS.jsonl -> RESULTS.judged.jsonl beside it (what `userturn judge` writes by default)."""
    stem = results.name[: -len(".jsonl")] if results.name.endswith(".jsonl") else results.name
    return results.with_name(f"{stem}{JUDGED_SUFFIX}")


def _folder_files(folder: Path, judged: Judged) -> list[Path]:
    try:
        names = sorted(entry.name for entry in os.scandir(folder)
                       if entry.name.endswith(".jsonl") and not entry.name.startswith(".") and entry.is_file())
    except OSError as exc:
        raise UserError(f"results folder {folder}: cannot list it ({exc.strerror})") from None
    present = set(names)
    if judged == "skip_judged":
        names = [n for n in names if not n.endswith(JUDGED_SUFFIX)]
    elif judged == "prefer_judged":
        names = [n for n in names if judged_name(Path(n)).name not in present]
    if not names:
        what = "results files that are not judged copies (*.jsonl but *.judged.jsonl)" if present else \
            "results files (*.jsonl)"
        raise UserError(f"results folder {folder}: no {what} in it")
    return [folder / n for n in names]


def results_files(named: PathLike | Sequence[PathLike], judged: Judged = "prefer_judged") -> list[Path]:
    """The results files that the command line's files and folders `named` stand for, in order. A missing or
    unreadable file, a folder without results files, a file named twice: UserError naming it (exit 2)."""
    items = [named] if isinstance(named, str | Path) else list(named)
    if not items:
        raise UserError("no results file named")
    files: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            files += _folder_files(item, judged)
        elif not item.exists():
            raise UserError(f"results file not found: {item}")
        else:
            files.append(item)
    seen: dict[Path, Path] = {}
    for path in files:
        if not os.access(path, os.R_OK):
            raise UserError(f"results file {path}: cannot read it (permission denied)")
        same = seen.setdefault(path.resolve(), path)
        if same is not path:
            raise UserError(f"results file {path} is named twice (as {same} and {path}); its records would count once "
                            "anyway, so name it once")
    return files


def kept_in(path: PathLike) -> str:
    """What a stopped run leaves in its results file, in words: where its completed records are kept, or that it
    wrote none (never a file that does not exist)."""
    path = Path(path)
    if path.is_file() and path.stat().st_size:
        return f"completed records are kept in {path}"
    return f"no record was written to {path}"


def as_paths(named: PathLike | Sequence[PathLike]) -> list[Path]:
    """A reader's argument, one results file or several, as paths of files that exist (else UserError naming it)."""
    paths = [Path(named)] if isinstance(named, str | Path) else [Path(p) for p in named]
    for path in paths:
        if not path.is_file():
            raise UserError(f"results file not found: {path}")
    return paths


def describe(named: PathLike | Sequence[PathLike]) -> str:
    """The files and folders named, as a title shows them (one file: its path, as given)."""
    return str(named) if isinstance(named, str | Path) else " ".join(map(str, named))


def read_results(paths: Sequence[PathLike]) -> tuple[dict[str, ProbeRecord], ReadReport]:
    """`read_records` over several files as if they were one, in order (see the module docstring)."""
    records: dict[str, ProbeRecord] = {}
    report = ReadReport()
    for path in paths:
        read_records_into(Path(path), records, report)
    return records, report


def configs_of(paths: Sequence[PathLike]) -> dict[str, ConfigLine]:
    """The configuration lines of several files by fingerprint (the first of each, in order)."""
    configs: dict[str, ConfigLine] = {}
    for path in paths:
        for fingerprint, config in read_configs(path).items():
            configs.setdefault(fingerprint, config)
    return configs
