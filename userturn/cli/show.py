"""`userturn show RESULTS... [KEY]`: the generated user turns as a table (`report.show`), or one record whole, with the
exact prompt it was generated from, rebuilt from the results files' configuration lines
(`client.render.prompt_replay`) or from `--tokenizer` / `--manifest`, and checked against the record's
`prompt_sha256`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from userturn.cli.paths import Paths
from userturn.cli.results_args import add_results_argument
from userturn.core.errors import UserError

NAME = "show"
EXAMPLES = """\
  userturn show runs/smoke/results.jsonl
  userturn show runs/smoke/results.jsonl \\
      'smollm2-135m-instruct|mt-bench:reference|107|raw|none|t=0.0|s=0' --manifest quickstart-cpu
  userturn show runs/q9b.jsonl 'qwen3.5-9b|gsm8k|12|raw|none|t=0.0|s=0' --tokenizer Qwen/Qwen3.5-9B --prompt-only"""
PATHS = Paths(results="prefer_judged", inputs=(("chat_template", "--chat-template"),))


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    show = sub.add_parser("show", help="generated user turns beside the human next turn (MT-Bench), with labels",
                          description="Print the generated user turns of a results file as a table: short key (what "
                                      "`show FILE KEY` opens), model, item, temperature, sample, perturbation, "
                                      "query, generated turn, the human-written next turn where the dataset has one "
                                      "(meta.second_turn), and the label with who gave it. The table takes the "
                                      "terminal's width (piped: $COLUMNS, else 100).")
    add_results_argument(show, "prefer_judged", key=True)
    show.add_argument("--limit", type=int, default=None, metavar="N", help="the first N ok records only")
    filters = show.add_argument_group("filters (shell patterns such as 'Qwen/*' or '10?', matched against the whole "
                                      "value; repeat a flag for alternatives)")
    filters.add_argument("--model", action="append", default=[], metavar="PATTERN", help="models to show")
    filters.add_argument("--dataset", action="append", default=[], metavar="PATTERN", help="datasets to show")
    filters.add_argument("--label", action="append", default=[], metavar="PATTERN",
                         help="labels to show (`unjudged`: records no judge has labelled yet; `judge_failed`: "
                              "records whose judgement failed)")
    filters.add_argument("--perturb", action="append", default=[], metavar="PATTERN", help="perturbations to show")
    filters.add_argument("--temperature", action="append", default=[], type=float, metavar="T",
                         help="temperatures to show (as in `userturn report`)")
    filters.add_argument("--item", action="append", default=[], metavar="PATTERN", help="dataset item ids to show")
    show.add_argument("--json", action="store_true",
                      help="the selected records as JSON lines (every field, as in the results file) instead of a "
                           "table")
    add_key_arguments(show)  # KEY: one record whole, with its exact prompt (cli_show)
    return show



def run(args: argparse.Namespace) -> int:
    from userturn.client.short_keys import MIN_DIGITS
    from userturn.client.terminal import console
    from userturn.core.results_files import describe, results_files
    from userturn.report.show import ShowFilter, turns_tables
    from userturn.report.show_scan import scan_shown

    rows = ShowFilter(models=args.model, datasets=args.dataset, labels=args.label, perturbations=args.perturb,
                      temperatures=args.temperature, items=args.item)
    if wants_record(args):
        given = [flag for flag, values in (("--model", rows.models), ("--dataset", rows.datasets),
                                            ("--label", rows.labels), ("--perturb", rows.perturbations),
                                            ("--temperature", rows.temperatures), ("--item", rows.items)) if values]
        if given:
            raise UserError(f"{given[0]} filters the table of turns, not one KEY")
        return show_record(args)
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be at least 1 (got {args.limit})")
    shown = scan_shown(results_files(args.results), rows)  # a few integers per line; records read back one by one
    if shown.torn_tail:
        print(f"userturn: {describe(args.results)}: ignored a torn final line", file=sys.stderr)
    if args.json:
        for record in shown.records(limit=args.limit):
            sys.stdout.buffer.write(orjson.dumps(record.model_dump(mode="json")) + b"\n")
        return 0
    out = console()  # keys are unique among every record read, so a filtered table's keys still open
    for table in turns_tables(shown.records(ok_only=True, limit=args.limit), count=shown.ok_count,
                              with_human=shown.with_human, short_key=lambda key: shown.short_key(key, MIN_DIGITS),
                              limit=args.limit, width=out.width, title=f"userturn show: {' '.join(args.results)}"):
        out.print(table)
    return 0


def add_key_arguments(show: argparse.ArgumentParser) -> None:
    """The KEY form's arguments on the `show` parser."""
    show.description = (show.description or "") + (" With KEY: that one record whole, its prompt exactly as sent "
                                                    "(rebuilt and checked against the record's prompt_sha256).")
    show.set_defaults(key=None)  # KEY: the last of the RESULTS arguments when it names no file (results_args)
    g = show.add_argument_group("the prompt of a raw-mode record (default: rendered again from the results file's "
                                "configuration line; these flags replace it, for files from before those lines)")
    g.add_argument("--tokenizer", default=None, metavar="DIR_HUB_ID_OR_GGUF", help="the tokenizer the probe used")
    g.add_argument("--chat-template", default=None, metavar="FILE", help="the --chat-template the probe used")
    g.add_argument("--renderer", choices=["auto", "chat_template", "harmony"], default=None,
                   help="the renderer the probe used (default: the record's template engine)")
    g.add_argument("--manifest", default=None, metavar="FILE_OR_NAME",
                   help="take tokenizer, template and renderer from a manifest's probe: section (flags win)")
    g.add_argument("--date", type=_date, default=None, metavar="YYYY-MM-DD",
                   help="the day the probe ran, for templates that print the date (with --tokenizer; default: "
                        "today)")
    g.add_argument("--prompt-only", action="store_true",
                   help="print only the prompt, byte for byte as sent (raw: the prompt string; chat: the messages "
                        "JSON); exit 1 when it does not match the record's prompt_sha256")


def _date(text: str) -> Any:
    from datetime import datetime

    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(hour=12)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD, got {text!r}") from None


def replayer(args: argparse.Namespace, paths: list[Path]) -> Any:
    """The `Replayer` of the flags for the results files `paths` (a manifest's probe: section fills what the flags
    leave out)."""
    from userturn.client.render.prompt_replay import Replayer
    from userturn.core.results_files import configs_of

    tokenizer, chat_template, renderer = args.tokenizer, args.chat_template, args.renderer
    if args.manifest is not None:
        from userturn.orchestrate.run_builder import manifest_layer
        from userturn.serve.manifest import load_manifest

        layer = manifest_layer(load_manifest(args.manifest))  # a file, or a shipped manifest by name
        tokenizer = tokenizer or layer.tokenizer
        chat_template = chat_template or layer.chat_template
        renderer = renderer or layer.renderer
    return Replayer(tokenizer, chat_template, renderer, now=args.date, configs=configs_of(paths))


def record_flags(args: argparse.Namespace) -> list[str]:
    """The flags given that apply to one record (a KEY) only."""
    return [flag for flag, given in (("--tokenizer", args.tokenizer), ("--chat-template", args.chat_template),
                                     ("--renderer", args.renderer), ("--manifest", args.manifest),
                                     ("--date", args.date), ("--prompt-only", args.prompt_only)) if given]


def wants_record(args: argparse.Namespace) -> bool:
    """A KEY, or a flag that only makes sense with one."""
    return args.key is not None or bool(record_flags(args))


def show_record(args: argparse.Namespace) -> int:
    """Print one record (or only its prompt). Unknown key: UserError with the closest keys (exit 2)."""
    from userturn.client.probe.controls import CONTROL_MODELS
    from userturn.client.render.prompt_replay import find_record
    from userturn.client.short_keys import resolve_key
    from userturn.core.results_files import results_files
    from userturn.report.show import record_view

    if args.key is None:
        raise UserError(f"{record_flags(args)[0]} needs a KEY: it applies to one record (userturn show RESULTS... KEY)")
    if args.limit is not None:
        raise UserError("--limit applies to the table of turns, not to one KEY")
    paths = results_files(args.results)
    record = find_record(paths, resolve_key(paths, args.key))
    replay = replayer(args, paths)
    if record.model in CONTROL_MODELS:  # the dataset's human turn: nothing was generated, no prompt sent
        if args.prompt_only:
            raise UserError(f"record {record.key!r} is a {record.model} control (--controls): no prompt was sent")
        sys.stdout.write(record_view(record, None, f"none was sent: a {record.model} control holds a human turn "
                                     "from the dataset (--controls)", replay.config_of(record)))
        return 0
    try:
        prompt = replay.prompt(record)
        problem = None
    except UserError as exc:
        if args.prompt_only or replay.tokenizer is not None or replay.config_of(record) is not None:
            raise  # a renderer was asked for and does not fit: an error, not a quiet omission
        prompt, problem = None, str(exc)
    if args.prompt_only:
        assert prompt is not None
        sys.stdout.write(prompt.text)
        sys.stdout.flush()
        if not prompt.verified:
            print(f"userturn show: the rebuilt prompt's sha256 {prompt.sha256[:16]} is not the record's "
                  f"prompt_sha256 {(prompt.recorded_sha256 or 'none')[:16]}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(record_view(record, prompt, problem, replay.config_of(record)))
    return 0 if prompt is None or prompt.verified else 1
