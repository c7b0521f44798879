"""`userturn rerank RESULTS...`: does the follow-up rate rank sampled answers like correctness does
(`report.rerank`)?"""

from __future__ import annotations

import argparse
import json
import sys

from userturn.cli.paths import Paths
from userturn.cli.results_args import add_results_argument, read_named

NAME = "rerank"
EXAMPLES = """\
  userturn rerank runs/q9b.judged.jsonl
  userturn rerank runs/q9b.judged.jsonl --json"""
PATHS = Paths(results="prefer_judged")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    rerank = sub.add_parser("rerank", help="does the follow-up rate rank sampled answers like correctness does?",
                            description="For queries with several sampled assistant responses, score each "
                                        "response by the genuine follow-up rate it elicits and compare with task "
                                        "correctness (AUROC, within-query AUROC, top-1 agreement).")
    add_results_argument(rerank, "prefer_judged")
    rerank.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    return rerank


def run(args: argparse.Namespace) -> int:
    from userturn.report.rerank import as_dicts, rerank, rerank_table

    rows = rerank(read_named(args.results))
    if args.json:
        print(json.dumps(as_dicts(rows), indent=2))
        return 0
    if not rows:
        print("userturn: no query has labeled records with task correctness (need a scored dataset, judged "
              "records, and several assistant samples per query)", file=sys.stderr)
        return 1
    from userturn.client.terminal import console as make_console

    console = make_console()
    console.print(rerank_table(rows, f"userturn rerank: {' '.join(args.results)}"))
    console.print("AUROC: correct vs incorrect responses by follow-up rate (0.5 = no signal); within: same-query "
                  "pairs only; top-1: the highest-rate response is correct (mixed queries: with correct and "
                  "incorrect responses), vs a random pick in brackets.")
    return 0
