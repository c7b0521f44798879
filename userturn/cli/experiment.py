"""`userturn run` (experiment files), `userturn export` (training data), `userturn rerank`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import orjson

from userturn.cli.argtypes import positive_int
from userturn.cli.probe import add_network_arguments, configure_network, print_failures, shard_arg
from userturn.cli.results_args import add_results_argument
from userturn.cli.show import add_arguments as add_show_arguments
from userturn.cli.show import show_record, wants_record
from userturn.core.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    """Add `run`, `export`, `show`, `compact` and `rerank` to the `userturn` parser."""
    run = sub.add_parser("run", help="run an experiment file (models x datasets x ... grid), then report",
                         description="Run every model x dataset x mode of an experiment YAML into one resumable "
                                     "results file, <out_dir>/<name>/results.jsonl, and print the report. "
                                     "Rerun the same command to resume.")
    run.add_argument("experiment", metavar="EXPERIMENT", help="experiment YAML, or a shipped experiment by name (e.g. "
                     "smoke; `userturn list` shows them)")
    run.add_argument("--out-dir", default=None, help="parent of the run directory (default: the file's out_dir)")
    run.add_argument("--no-progress", action="store_true",
                   help="plain progress lines (every 10 s and one at the end) instead of the live view")
    run.add_argument("--dry-run", action="store_true",
                     help="validate, load datasets, check every base_url model's endpoint (reachable, serving the "
                          "model; exit 3 naming each that is not) and print the plan; nothing is launched")
    grid = run.add_argument_group("a part of the grid (a smoke test of a real grid: the same records the full run "
                                  "makes, so the full run resumes them)")
    grid.add_argument("--limit", type=positive_int, default=None, metavar="N",
                      help="the first N items of every dataset (after its own limit and shuffle_seed)")
    grid.add_argument("--model", dest="models", action="append", default=[], metavar="PATTERN",
                      help="only the models whose label (manifest file name) or model name matches this shell "
                           "pattern; repeat for several")
    run.add_argument("--controls", action="store_true",
                     help="as the experiment's `controls: true`: each item's own human next turn (model human) and "
                          "another item's (human-shuffled), judged like any record, no generation")
    run.add_argument("--keep-going", action="store_true",
                     help="when a model fails (unreachable, not served, its server fails to start), go on with the "
                          "others; at the end report the finished part and one line per failed model (exit 3)")
    run.add_argument("--rejudge", action="store_true",
                     help="the results file holds labels of another judge panel (other `judges:` models or prompt): "
                          "label those records again instead of refusing")
    run.add_argument("--launcher", choices=["local", "slurm"], default=None,
                     help="where manifest servers run (overrides the file's `launcher`; a model's own wins)")
    add_network_arguments(run.add_argument_group("network"))
    run.add_argument("--parallel-models", type=positive_int, default=1, metavar="K",
                     help="keep up to K models' servers (SLURM jobs) queued, starting or serving at once, so queue "
                          "and start-up waits overlap; the ready ones are probed one at a time (default 1)")
    shards = run.add_argument_group("sharded runs (the shards together write the records of the unsharded run)")
    shards.add_argument("--shard", type=shard_arg, default=None, metavar="I/N",
                        help="run shard I of N only (items split by a hash of their id, after limit and "
                             "shuffle_seed) into <out_dir>/<name>/results.shard-I-of-N.jsonl; resume with the same N")
    shards.add_argument("--workers", type=positive_int, default=None, metavar="N",
                        help="run the N shards at once as local processes (`run --shard I/N` each; with --launcher "
                             "slurm: as one SLURM job array), wait for all, exit with the worst exit code")
    run.set_defaults(func=run_command)

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
    add_results_argument(export, "export")
    export.add_argument("--format", choices=["sft", "preference", "sft-human", "inspect"], required=True,
                        help="inspect: one Inspect eval log (.eval) per model x dataset x configuration, read with "
                        "`inspect view --log-dir DIR` (needs userturn[inspect])")
    export.add_argument("--out", default=None, metavar="FILE",
                        help="output file (default: stdout); a folder for --format inspect")
    export.add_argument("--perturb", action="append", default=None, metavar="NAME",
                        help="sft, preference: take the records of this perturbation's contexts (repeatable; `all` "
                             "for every one; default: none only, since a follow-up to a falsified or generic "
                             "assistant turn teaches reacting to that turn)")
    export.set_defaults(func=export_command)

    show = sub.add_parser("show", help="generated user turns beside the human next turn (MT-Bench), with labels",
                          description="Print the generated user turns of a results file as a table: short key (what "
                                      "`show FILE KEY` opens), model, item, temperature, sample, perturbation, "
                                      "query, generated turn, the human-written next turn where the dataset has one "
                                      "(meta.second_turn), and the label with who gave it. The table takes the "
                                      "terminal's width (piped: $COLUMNS, else 100).")
    add_results_argument(show, "show")
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
    add_show_arguments(show)  # KEY: one record whole, with its exact prompt (cli_show)
    show.set_defaults(func=show_command)

    compact = sub.add_parser("compact", help="rewrite a results file to its current lines (drop superseded ones)",
                             description="Rewrite a results file in place, atomically, to its current lines: the "
                                         "first configuration line of each configuration and the last line of each "
                                         "record (key and configuration). Lines superseded by a later one (a record "
                                         "judged again, an error retried) and a torn final line are dropped.")
    add_results_argument(compact, "compact")
    compact.set_defaults(func=compact_command)

    rerank = sub.add_parser("rerank", help="does the follow-up rate rank sampled answers like correctness does?",
                            description="For queries with several sampled assistant responses, score each "
                                        "response by the genuine follow-up rate it elicits and compare with task "
                                        "correctness (AUROC, within-query AUROC, top-1 agreement).")
    add_results_argument(rerank, "rerank")
    rerank.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    rerank.set_defaults(func=rerank_command)


def compact_command(args: argparse.Namespace) -> int:
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


def run_command(args: argparse.Namespace) -> int:
    from userturn.cli.run_shards import check_flags, workers_command
    from userturn.core import aio
    from userturn.core.results_lock import results_lock
    from userturn.core.shards import sharded_path
    from userturn.core.shipped import resolve_named
    from userturn.orchestrate.experiment import check_files, load_experiment, resolve, results_path
    from userturn.orchestrate.grid import run_experiment
    from userturn.orchestrate.plan_preview import select

    check_flags(args)
    configure_network(args)
    source = resolve_named(args.experiment, "experiments")  # a file, or a shipped experiment by name
    exp, base = load_experiment(source)
    exp = select(exp, args.limit, args.models)
    if args.controls:
        exp = exp.model_copy(update={"controls": True})
    check_files(exp, source)
    if args.dry_run:
        if args.keep_going:
            raise UserError("--keep-going applies to a real run, not to --dry-run")
        return dry_run(exp, base, source, args.shard, args.launcher)
    if args.workers is not None and args.workers > 1:
        return workers_command(args, exp, source)
    from userturn.serve.launcher import terminate_on_sigterm

    failures: list[str] | None = [] if args.keep_going else None
    # held for the whole grid (exit 2 if another run has it); SIGTERM tears down servers launched in threads, too
    with results_lock(sharded_path(results_path(exp, args.out_dir), args.shard)), terminate_on_sigterm():
        results, summaries = aio.run(run_experiment(exp, base, source, out_dir=args.out_dir,
                                                      progress=not args.no_progress, rejudge=args.rejudge,
                                                      launcher=args.launcher, parallel_models=args.parallel_models,
                                                      failures=failures, shard=args.shard))
    errors = sum(s.errors for s in summaries)
    from userturn.client.terminal import console
    from userturn.report.run_view import print_run_report

    if args.shard is None and results.is_file() and results.stat().st_size:
        print_run_report(console(), results,  # turns beside the human's, offline facts, table, notice, next steps
                         gold=[resolve(base, g) for g in exp.gold])
    print(f"userturn: results in {results} ({sum(s.ok for s in summaries)} new ok, {errors} errors, "
          f"{sum(s.skipped for s in summaries)} already done)", file=sys.stderr)
    status = print_failures(sum(s.not_applicable for s in summaries), errors,
                            sum(s.judge_failures for s in summaries), str(results))
    if failures:
        print(f"userturn: {len(failures)} of {len(exp.models)} models failed (--keep-going went on with the "
              "others; rerun the same command to resume them):", file=sys.stderr)
        for line in failures:
            print(f"userturn: failed: {line}", file=sys.stderr)
        status = 3
    if args.shard is not None and args.shard.count > 1:
        print(f"userturn: shard {args.shard} done; report it with the other shards' files "
              f"(<run dir>/results.shard-I-of-{args.shard.count}.jsonl)", file=sys.stderr)
    return status


def dry_run(exp: Any, base: Path, source: Path, shard: Any = None, launcher: str | None = None) -> int:
    """The plan from the experiment and its manifests first (nothing loaded, nothing launched), then the checks:
    datasets load, each model's chat template renders one real prompt (raw mode; printed), `base_url` models and
    judges answer. A failed check is one line and the others still run: exit 2 when data, a manifest or a template
    failed, else 3 when an endpoint did not answer."""
    from userturn.client.probe.dry_run import render_preview, shown
    from userturn.core import aio
    from userturn.orchestrate.experiment import (
        assistant_source,
        check_endpoints,
        check_scoring,
        load_items,
        naming_entry,
        target_source,
    )
    from userturn.orchestrate.plan_preview import build_plan, plan_lines
    from userturn.orchestrate.run_builder import ProbeTarget, load_renderer, preview

    plan = build_plan(exp, base, source, launcher)
    for line in plan_lines(exp, plan, exp.name if shard is None else f"{exp.name} (shard {shard})"):
        print(line)
    sys.stdout.flush()  # the plan is on the screen before any check waits on a hub or an endpoint
    problems = [m.problem for m in plan.models if m.problem]  # settings that do not resolve: exit 2
    loaded = []
    for index, entry in enumerate(exp.datasets):
        try:
            name, items, _ = load_items(entry, exp, base)
            check_scoring(exp, base, source, name, items)
            chosen = assistant_source(entry, exp, items, source)
        except UserError as exc:  # named once: by the check itself, else here
            problems.append(str(exc) if str(exc).startswith(str(source)) else
                            f"{source}: datasets.{index} ({entry.spec}): {exc}")
            continue
        loaded.append((name, items, chosen, len(items if shard is None else shard.select(items))))
    if loaded:
        print("items: " + ", ".join(f"{name} {count}" for name, _, _, count in loaded))
    if len(loaded) == len(exp.datasets):
        print(f"records planned: {plan.records_per_item(exp) * sum(count for *_, count in loaded)}")
    if "raw" in exp.modes and loaded:
        name, items, chosen, _ = loaded[0]
        for index, (entry, model) in enumerate(zip(exp.models, plan.models, strict=True)):
            if model.options is None:
                continue
            with naming_entry(source, index, entry, problems):
                fields, options = preview(target_source(entry, exp, base, launcher), [entry.layer(), exp.layer()])
                target = ProbeTarget(base_urls=[], model=str(entry.model or entry.label), **fields)
                prompt = render_preview(load_renderer(target, options), items, chosen)
                print(f"--- {entry.label}: raw prompt of the first {name} item, as it will be sent (ends at the "
                      f"open user header) ---\n{shown(prompt)}\n--- end of prompt ---")
    endpoints = sum(entry.base_url is not None for entry in exp.models)
    judges = sum(j.model not in ("self", "rules") and j.base_url is not None for j in exp.judges)
    model_problems, judge_problems = aio.run(check_endpoints(exp, base, source))
    launched = len(exp.models) - endpoints
    parts = [f"{endpoints - len(model_problems)} of {endpoints} base_url models reachable and serving their model"
             ] if endpoints else []
    parts += [f"{judges - len(judge_problems)} of {judges} judges reachable and serving theirs"] if judges else []
    parts += [f"{launched} manifest models validated only (launched by the real run)"] if launched else []
    print("endpoints: " + "; ".join(parts))
    for problem in problems + model_problems + judge_problems:
        print(f"userturn: {problem}", file=sys.stderr)
    return 2 if problems else 3 if model_problems or judge_problems else 0


def _records(named: list[str]) -> list:
    """The records of the results files and folders named, read as one (`userturn.core.results_files`)."""
    from userturn.core.results_files import describe, read_results, results_files

    records, report = read_results(results_files(named))
    if report.torn_tail:
        print(f"userturn: {describe(named)}: ignored a torn final line", file=sys.stderr)
    return list(records.values())


def export_command(args: argparse.Namespace) -> int:
    if args.perturb and args.format in ("inspect", "sft-human"):
        raise UserError(f"--perturb chooses the contexts of sft and preference rows, not of {args.format} "
                        "(sft-human takes unperturbed conversations; inspect every record)")
    if args.format == "inspect":
        return _export_inspect(args)
    from userturn.report.export import ALL, DEFAULT_CONTEXTS, export_rows

    records = _records(args.results)
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


def show_command(args: argparse.Namespace) -> int:
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


def rerank_command(args: argparse.Namespace) -> int:
    from userturn.report.rerank import as_dicts, rerank, rerank_table

    rows = rerank(_records(args.results))
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
