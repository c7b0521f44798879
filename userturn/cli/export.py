"""`userturn export RESULTS... --format F`: judged records as training data (`report.export`) or as Inspect eval
logs (`report.inspect_log`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from userturn.cli.paths import Paths, output_dir, output_file
from userturn.cli.results_args import add_results_argument, read_named
from userturn.core.errors import UserError

NAME = "export"
EXAMPLES = """\
  userturn export runs/q9b.judged.jsonl --format sft --out sft.jsonl
  userturn export runs/q9b.judged.jsonl --format preference --out pairs.jsonl
  userturn export runs/smoke/results.jsonl --format sft-human --out human.jsonl
  # Inspect eval logs, one per model x dataset x configuration; read them with: inspect view --log-dir logs/
  userturn export runs/grid/ --format inspect --out logs/"""


def check_out(args: argparse.Namespace) -> None:
    """--out: a file, or the folder of the Inspect logs (required with --format inspect)."""
    if args.format == "inspect":
        if args.out is None:
            raise UserError("--format inspect writes one log per configuration: name a folder with --out DIR")
        output_dir(args.out, "--out")
    elif args.out is not None:
        output_file(args.out, "--out")


PATHS = Paths(results="prefer_judged", check=check_out)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    export = sub.add_parser("export", help="judged results as SFT / preference training data (TRL JSONL), or as "
                            "Inspect eval logs for `inspect view`",
                            description="Write judged conversations as TRL conversational JSONL: `sft` rows end "
                                        "with the genuine follow-up as the final user turn; `preference` rows pair a "
                                        "genuine follow-up (chosen) with a degenerate one (rejected) for the same "
                                        "context. Both take unperturbed contexts only unless --perturb says "
                                        "otherwise, and carry key, model, dataset, perturbation and temperature; sft "
                                        "writes each conversation and turn once. Unlabeled and failed records are "
                                        "skipped and counted. `sft-human` rows end with the human-written next turn "
                                        "the dataset carries (meta.second_turn, MT-Bench), one per distinct "
                                        "unperturbed conversation.")
    add_results_argument(export, "prefer_judged")
    export.add_argument("--format", choices=["sft", "preference", "sft-human", "inspect"], required=True,
                        help="inspect: one Inspect eval log (.eval) per model x dataset x configuration, read with "
                        "`inspect view --log-dir DIR` (needs userturn[inspect])")
    export.add_argument("--out", default=None, metavar="FILE",
                        help="output file (default: stdout); a folder for --format inspect")
    export.add_argument("--perturb", action="append", default=None, metavar="NAME",
                        help="sft, preference: take the records of this perturbation's contexts (repeatable; `all` "
                             "for every one; default: none only, since a follow-up to a falsified or generic "
                             "assistant turn teaches reacting to that turn)")
    return export



def run(args: argparse.Namespace) -> int:
    if args.perturb and args.format in ("inspect", "sft-human"):
        raise UserError(f"--perturb chooses the contexts of sft and preference rows, not of {args.format} "
                        "(sft-human takes unperturbed conversations; inspect every record)")
    if args.format == "inspect":
        return _export_inspect(args)
    from userturn.report.export import ALL, DEFAULT_CONTEXTS, export_rows

    records = read_named(args.results)
    contexts = tuple(args.perturb or DEFAULT_CONTEXTS)
    present = {r.perturbation for r in records}
    for name in args.perturb or ():
        if name != ALL and name not in present:
            raise UserError(f"--perturb {name}: no record with that perturbation (present: "
                            f"{', '.join(sorted(present))})")
    rows, stats = export_rows(records, args.format, contexts)
    data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    if args.out:
        Path(args.out).write_bytes(data)  # its folder is made by `cli.paths`
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    if args.format == "sft-human":
        skipped = (f"skipped: {stats.skipped_no_human_turn} without a human next turn, {stats.skipped_perturbed} "
                   f"perturbed, {stats.duplicates} repeating a conversation already exported")
    else:
        skipped = (f"contexts: {', '.join(contexts)}; skipped: {stats.skipped_perturbed} from other perturbations' "
                   f"contexts, {stats.skipped_unlabeled} unlabeled, {stats.skipped_error} without a generation"
                   + (f", {stats.skipped_not_genuine} not genuine, {stats.duplicates} repeating a row already "
                      "exported" if args.format == "sft" else f", {stats.unpaired} without a partner"))
    print(f"userturn: exported {stats.written} {args.format} rows from {stats.records} records"
          f"{' to ' + args.out if args.out else ''} ({skipped})", file=sys.stderr)
    if stats.written == 0:
        print(f"userturn: nothing to export ({_nothing_hint(args.format, stats)})", file=sys.stderr)
        return 1
    return 0


def _nothing_hint(fmt: str, stats: Any) -> str:
    """Why an export wrote no row, from what it counted."""
    labelled = sum(stats.by_label.values())
    if fmt == "sft-human":
        return "no record carries a human next turn (meta.second_turn: e.g. --dataset mt-bench)"
    if not labelled and stats.skipped_perturbed and not (stats.skipped_unlabeled or stats.skipped_error):
        return "every record is from a perturbed context; take them with --perturb NAME (or --perturb all)"
    if not labelled:
        return "judge the results first: records need labels"
    if fmt == "sft":
        return f"none of the {labelled} labelled records is a genuine follow-up"
    return (f"no context has both a genuine follow-up and another label among its {labelled} labelled records; "
            "pairs need several samples per context (--samples) at a temperature above 0")


def _export_inspect(args: argparse.Namespace) -> int:
    from userturn.report.inspect_log import export_inspect

    done = export_inspect(args.results, args.out)
    print(f"userturn: wrote {len(done.logs)} Inspect log(s), {done.samples} samples ({done.labelled} labelled, "
          f"{done.judge_failures} judge failures, {done.generation_errors} generation errors) to {args.out}",
          file=sys.stderr)
    print(f"next: inspect view --log-dir {args.out}", file=sys.stderr)
    return 0 if done.samples else 1
