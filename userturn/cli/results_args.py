"""The RESULTS argument of `report`, `judge`, `show`, `export`, `rerank` and `compact`: one or more results files
or folders of them (`userturn.core.results_files`), checked before the command runs (`cli.paths`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser is built before every command: the readers load only when one runs
    from userturn.core.results_files import Judged

COMMANDS: dict[str, Judged] = {"report": "prefer_judged", "show": "prefer_judged", "export": "prefer_judged",
                               "rerank": "prefer_judged", "judge": "skip_judged", "compact": "all"}
READ_AS_ONE = ("several are read as one: the last line of a key and configuration counts, wherever it is; a folder "
               "stands for its *.jsonl files in name order")
HELP: dict[Judged, str] = {
    "prefer_judged": f"results files or folders ({READ_AS_ONE}; X.judged.jsonl, `judge`'s output, in place of the "
                     "X.jsonl beside it)",
    "skip_judged": "results files or folders (a folder: its *.jsonl files but the *.judged.jsonl copies); each is "
                   "judged into its own output",
    "all": "results files or folders (a folder: its *.jsonl files); each is rewritten on its own",
}


def add_results_argument(parser: argparse.ArgumentParser, command: str) -> None:
    """RESULTS... on `parser` (`show` takes an optional KEY after them: `ResultsAndKey`)."""
    if command == "show":
        parser.add_argument("results", nargs="+", action=ResultsAndKey, metavar="RESULTS",
                            help=HELP["prefer_judged"] + "; the last argument is a record's KEY when it is no file "
                            "or folder and does not end in .jsonl")
    else:
        parser.add_argument("results", nargs="+", metavar="RESULTS", help=HELP[COMMANDS[command]])


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
