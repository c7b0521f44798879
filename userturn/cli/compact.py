"""`userturn compact RESULTS...`: each results file rewritten in place to its current lines (`core.jsonl.compact`)."""

from __future__ import annotations

import argparse
import sys

from userturn.cli.paths import Paths
from userturn.cli.results_args import add_results_argument

NAME = "compact"
EXAMPLES = """\
  userturn compact runs/q9b.judged.jsonl"""
PATHS = Paths(results="all")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    compact = sub.add_parser("compact", help="rewrite a results file to its current lines (drop superseded ones)",
                             description="Rewrite a results file in place, atomically, to its current lines: the "
                                         "first configuration line of each configuration and the last line of each "
                                         "record (key and configuration). Lines superseded by a later one (a record "
                                         "judged again, an error retried) and a torn final line are dropped.")
    add_results_argument(compact, "all")
    return compact



def run(args: argparse.Namespace) -> int:
    from userturn.core.jsonl import compact
    from userturn.core.results_files import results_files

    for path in results_files(args.results, "all"):
        report = compact(path)
        print(f"userturn compact: {path}: kept {report.kept} of {report.records} record lines "
              f"({report.superseded} superseded) and {report.configs} configuration lines ({report.dropped_configs} "
              f"repeated dropped){'; dropped a torn final line' if report.torn_tail else ''}"
              + (f"; removed {report.stale_temporaries} temporary files an interrupted compact left"
                 if report.stale_temporaries else ""), file=sys.stderr)
    return 0
