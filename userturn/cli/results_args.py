"""The RESULTS argument of the commands that read results files: one or more results files or folders of them
(`userturn.core.results_files`), checked before the command runs (`cli.paths`), and read as one (`read_named`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser is built before every command: the readers load only when one runs
    from userturn.core.results_files import Judged

READ_AS_ONE = ("several are read as one: the last line of a key and configuration counts, wherever it is; a folder "
               "stands for its *.jsonl files in name order")
HELP: dict[Judged, str] = {
    "prefer_judged": f"results files or folders ({READ_AS_ONE}; X.judged.jsonl, `judge`'s output, in place of the "
                     "X.jsonl beside it)",
    "skip_judged": "results files or folders (a folder: its *.jsonl files but the *.judged.jsonl copies); each is "
                   "judged into its own output",
    "all": "results files or folders (a folder: its *.jsonl files); each is rewritten on its own",
}


def add_results_argument(parser: argparse.ArgumentParser, kind: Judged, *, key: bool = False) -> None:
    """RESULTS... on `parser`, read as `kind` says (the command's `PATHS.results`); `key`: an optional KEY after them
    (`show`: `ResultsAndKey`)."""
    if key:
        parser.add_argument("results", nargs="+", action=ResultsAndKey, metavar="RESULTS",
                            help=HELP[kind] + "; the last argument is a record's KEY when it is no file or folder "
                            "and does not end in .jsonl")
    else:
        parser.add_argument("results", nargs="+", metavar="RESULTS", help=HELP[kind])


def is_key(text: str) -> bool:
    """Whether the last of `show`'s arguments names a record rather than a results file or folder."""
    return not Path(text).exists() and not text.endswith(".jsonl")


class ResultsAndKey(argparse.Action):
    """`show RESULTS... [KEY]`: the last of several arguments is the KEY when `is_key`; sets `results` and `key`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        items = [str(v) for v in (values or [])]
        key = items.pop() if len(items) > 1 and is_key(items[-1]) else None
        setattr(namespace, self.dest, items)
        namespace.key = key


def judge_out_is_folder(named: Sequence[str]) -> bool:
    """`judge --out` names a folder (one output per input) when RESULTS is several files or a folder."""
    return len(named) > 1 or Path(named[0]).is_dir()


def read_named(named: list[str]) -> list[Any]:
    """The current records of the results files and folders named, read as one (`userturn.core.results_files`)."""
    import sys

    from userturn.core.results_files import describe, read_results, results_files

    records, report = read_results(results_files(named))
    if report.torn_tail:
        print(f"userturn: {describe(named)}: ignored a torn final line", file=sys.stderr)
    return list(records.values())
