"""`userturn run EXPERIMENT`: an experiment file's grid through the front door (`orchestrate.api.open_experiment`,
`experiment.grid_of`, `grid_spec.prepare`, `grid.run_grid`), then its report; `--dry-run` prints the plan and the
checks (`orchestrate.plan_preview`), `--workers` and `--shard` split it (`cli.run_shards`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from userturn.cli.argtypes import positive_int
from userturn.cli.network import add_network_arguments, configure_network
from userturn.cli.paths import Paths
from userturn.cli.probe import print_failures, shard_arg
from userturn.core.errors import UserError

NAME = "run"
EXAMPLES = """\
  userturn run smoke
  userturn run experiments/paper.yaml --dry-run
  userturn run experiments/paper.yaml --out-dir /scratch/runs --launcher slurm
  # split the items over 4 processes (results.shard-I-of-4.jsonl each); --launcher slurm: a 4-task job array
  userturn run experiments/paper.yaml --workers 4
Rerun the same command to resume; --dry-run checks every model's template with one rendered prompt."""
PATHS = Paths(checked_dirs=(("out_dir", "--out-dir"),))  # created when the run starts


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    return run



def run(args: argparse.Namespace) -> int:
    from userturn.cli.run_shards import check_flags, workers_command
    from userturn.core import aio
    from userturn.orchestrate.api import open_experiment
    from userturn.orchestrate.experiment import from_file, grid_of
    from userturn.orchestrate.grid import run_grid
    from userturn.orchestrate.grid_spec import prepare

    check_flags(args)
    configure_network(args)
    exp, base, source = open_experiment(args.experiment, limit=args.limit, models=args.models)
    if args.controls:
        exp = exp.model_copy(update={"controls": True})
    grid = grid_of(exp, base, source, out_dir=args.out_dir, launcher=args.launcher, shard=args.shard,
                   progress=not args.no_progress, rejudge=args.rejudge)
    if args.dry_run:
        if args.keep_going:
            raise UserError("--keep-going applies to a real run, not to --dry-run")
        return dry_run(exp, grid)
    if args.workers is not None and args.workers > 1:
        return workers_command(args, exp, source, base)
    from userturn.serve.launcher import terminate_on_sigterm

    failures: list[str] | None = [] if args.keep_going else None
    with terminate_on_sigterm():  # SIGTERM tears down servers launched in threads, too
        prepared = prepare(grid)
        summaries = aio.run(run_grid(prepared, parallel_models=args.parallel_models, failures=failures))
    results = grid.out
    errors = sum(s.errors for s in summaries)
    from userturn.client.terminal import console
    from userturn.report.run_view import print_run_report

    if args.shard is None and results.is_file() and results.stat().st_size:
        print_run_report(console(), results,  # turns beside the human's, offline facts, table, notice, next steps
                         gold=[from_file(base, g) for g in exp.gold])
    print(f"userturn: results in {results} ({sum(s.ok for s in summaries)} new ok, {errors} errors, "
          f"{sum(s.skipped for s in summaries)} already done)", file=sys.stderr)
    status = print_failures(sum(s.not_applicable for s in summaries), errors,
                            sum(s.judge_failures for s in summaries), str(results))
    for notice in prepared.notices:  # said with the summary, as `probe` says it
        print(notice, file=sys.stderr)
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


def dry_run(exp: Any, grid: Any) -> int:
    """The plan from the experiment and its manifests first (nothing loaded, nothing launched; on the screen before
    any check waits on a hub or an endpoint), then the checks (`plan_preview.check`): each failure one line."""
    from userturn.orchestrate.plan_preview import build_plan, check, plan_lines

    plan = build_plan(grid)
    for line in plan_lines(exp, grid, plan):
        print(line)
    sys.stdout.flush()
    checks = check(exp, grid, plan)
    for line in checks.lines:
        print(line)
    for line in checks.notices:
        print(line, file=sys.stderr)
    for problem in checks.problems + checks.endpoint_problems:
        print(f"userturn: {problem}", file=sys.stderr)
    return checks.exit_code
