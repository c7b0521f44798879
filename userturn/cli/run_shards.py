"""`userturn run --shard I/N` and `userturn run --workers N`: the parts of `run` that split a run into shards
(userturn.core.shards) and run them as local processes (userturn.orchestrate.shard_workers)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from userturn.core.errors import UserError
from userturn.core.shards import Shard

# `run` flags a worker is given as the parent got them (a test checks that every flag of `run` is in one of the two)
FORWARDED = ("out_dir", "keep_going", "rejudge", "launcher", "proxy", "ca_bundle", "no_model_check",
             "parallel_models")
PARENT_ONLY = ("experiment", "no_progress", "dry_run", "shard", "workers", "func", "command")


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that do not go with --shard / --workers."""
    if args.workers is not None and args.shard is not None:
        raise UserError("--workers runs every shard itself: give --workers N, or --shard I/N for one shard")
    if args.workers is not None and args.dry_run:
        raise UserError("--dry-run checks the whole run; drop --workers (or give --shard I/N to plan one shard)")


def worker_argv(args: argparse.Namespace, source: Path, shard: Shard) -> list[str]:
    """The command line of the process running `shard` of the run `args` describes: `run SOURCE --shard I/N
    --no-progress` and the flags of FORWARDED."""
    argv = [sys.executable, "-m", "userturn", "run", str(source), "--shard", str(shard), "--no-progress"]
    for dest in FORWARDED:
        value = getattr(args, dest)
        flag = "--" + dest.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (None, False):
            argv += [flag, str(value)]
    return argv


def workers_command(args: argparse.Namespace, exp: object, source: Path) -> int:
    """Run the N shards as local processes, wait for all; the worst exit code."""
    from userturn.core import aio
    from userturn.core.results_lock import results_lock
    from userturn.core.shards import check_split
    from userturn.orchestrate.experiment import RESUME_HINT, results_path
    from userturn.orchestrate.shard_workers import Worker, run_workers, worst
    from userturn.serve.launcher import terminate_on_sigterm

    unsharded = results_path(exp, args.out_dir)  # type: ignore[arg-type]
    count = args.workers
    check_split(unsharded, Shard(1, count), hint=RESUME_HINT)  # refused before any process starts
    workers = [Worker(shard, worker_argv(args, source, shard), shard.path(unsharded))
               for shard in (Shard(i, count) for i in range(1, count + 1))]
    for worker in workers:
        print(f"userturn: shard {worker.shard} writes {worker.results}", file=sys.stderr)
    # the unsharded file's lock: no second `--workers` run, and no unsharded run, while the shards write
    with results_lock(unsharded), terminate_on_sigterm():
        exits = aio.run(run_workers(workers))
    for done in exits:
        if done.returncode:
            print(f"userturn: shard {done.worker.shard} exited {done.returncode} (its completed records are kept in "
                  f"{done.worker.results}; rerun the same command to resume it): "
                  f"{shlex.join(done.worker.argv[1:])}", file=sys.stderr)
    finished = sum(not done.returncode for done in exits)
    print(f"userturn: {finished} of {count} shards finished; results in {', '.join(str(w.results) for w in workers)}",
          file=sys.stderr)
    print(next_step([w.results for w in workers]), file=sys.stderr)
    return worst(exits)


def next_step(files: list[Path]) -> str:
    """How to report the shards of a run together."""
    merged = files[0].parent / "results.all-shards.jsonl"
    return (f"next: report the shards together: cat {' '.join(shlex.quote(str(f)) for f in files)} > "
            f"{shlex.quote(str(merged))} && userturn report {shlex.quote(str(merged))}")


__all__ = ["FORWARDED", "PARENT_ONLY", "check_flags", "next_step", "worker_argv", "workers_command"]
