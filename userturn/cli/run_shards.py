"""`userturn run --shard I/N` and `userturn run --workers N`: the parts of `run` that split a run into shards
(userturn.core.shards) and run them as local processes (userturn.orchestrate.shard_workers)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from userturn.cli.network import PROXY_ENV
from userturn.core.errors import UserError
from userturn.core.results_files import kept_in
from userturn.core.shards import MAX_SHARDS, Shard

# `run` flags a worker is given as the parent got them (a test checks that every flag of `run` is in one of the two)
FORWARDED = ("out_dir", "keep_going", "rejudge", "launcher", "ca_bundle", "no_model_check", "parallel_models",
             "controls", "limit", "models")
PARENT_ONLY = ("experiment", "no_progress", "dry_run", "shard", "workers", "func", "command")
# flags a worker gets through its environment, never its command line (a proxy URL may carry a password): local
# processes inherit it, a SLURM array task gets it through sbatch --export=ALL
THROUGH_ENVIRONMENT = {"proxy": PROXY_ENV}


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that do not go with --shard / --workers."""
    if args.workers is not None and args.shard is not None:
        raise UserError("--workers runs every shard itself: give --workers N, or --shard I/N for one shard")
    if args.workers is not None and args.workers > MAX_SHARDS:
        raise UserError(f"--workers {args.workers}: at most {MAX_SHARDS} shards")
    if args.workers is not None and args.dry_run:
        raise UserError("--dry-run checks the whole run; drop --workers (or give --shard I/N to plan one shard)")


def worker_argv(args: argparse.Namespace, source: Path, shard: Shard | str) -> list[str]:
    """The command line of the process running `shard` (or the word a SLURM array task fills in) of the run `args`
    describes: `run SOURCE --shard I/N --no-progress` and the flags of FORWARDED."""
    from userturn.serve.engines import flag_args

    models = [arg for pattern in getattr(args, "models", None) or [] for arg in ("--model", pattern)]
    return [sys.executable, "-m", "userturn", "run", str(source), "--shard", str(shard), "--no-progress",
            *flag_args(*(("--" + dest.replace("_", "-"), getattr(args, dest)) for dest in FORWARDED
                         if dest != "models")), *models]


def worker_environment(args: argparse.Namespace) -> dict[str, str]:
    """The variables every worker gets on top of this process's environment (THROUGH_ENVIRONMENT)."""
    return {name: str(value) for dest, name in THROUGH_ENVIRONMENT.items() if (value := getattr(args, dest))}


def shown_command(argv: list[str]) -> str:
    """A worker's command line as it is printed: redacted (`core.fingerprint.redacted_command`), as every command
    line userturn writes or prints."""
    from userturn.core.fingerprint import redacted_command

    return shlex.join(redacted_command(argv))


def workers_command(args: argparse.Namespace, exp: Any, source: Path, base: Path) -> int:
    """Run the N shards as local processes (with `--launcher slurm`: as one SLURM job array), wait for all; the
    worst exit code."""
    from userturn.core.results_lock import results_lock
    from userturn.core.shards import check_split
    from userturn.orchestrate.experiment import RESUME_HINT, results_path
    from userturn.serve.launcher import terminate_on_sigterm

    unsharded = results_path(exp, base, args.out_dir)
    count = args.workers
    check_split(unsharded, Shard(1, count), hint=RESUME_HINT)  # refused before any process starts
    shards = [Shard(i, count) for i in range(1, count + 1)]
    files = [shard.path(unsharded) for shard in shards]
    for shard, path in zip(shards, files, strict=True):
        print(f"userturn: shard {shard} writes {path}", file=sys.stderr)
    # the unsharded file's lock: no second `--workers` run, and no unsharded run, while the shards write
    os.environ.update(worker_environment(args))  # inherited by the local processes and by sbatch
    with results_lock(unsharded), terminate_on_sigterm():
        if args.launcher == "slurm":
            codes, commands = _slurm_array(args, exp, source, unsharded.parent / "slurm-shards")
        else:
            codes, commands = _local_processes(args, source, shards, files)
    for shard, path, code, command in zip(shards, files, codes, commands, strict=True):
        if code:
            print(f"userturn: shard {shard} exited {code} ({kept_in(path)}; rerun the same command to resume it): "
                  f"{command}", file=sys.stderr)
    print(f"userturn: {sum(not code for code in codes)} of {count} shards finished; results in "
          f"{', '.join(str(f) for f in files)}", file=sys.stderr)
    written = [f for f in files if f.is_file() and f.stat().st_size]
    if written and all(code in (0, 1) for code in codes):  # every shard ran to its end (1: some samples failed)
        from userturn.client.terminal import console
        from userturn.report.run_view import print_run_report

        print_run_report(console(), written)  # the unsharded run's printout, over the shards read as one
    else:
        print(next_step(files), file=sys.stderr)
    return max(codes)


def _local_processes(args: argparse.Namespace, source: Path, shards: list[Shard], files: list[Path]
                     ) -> tuple[list[int], list[str]]:
    """Each shard as a local process; (exit codes, command lines)."""
    from userturn.core import aio
    from userturn.orchestrate.shard_workers import Worker, run_workers

    workers = [Worker(shard, worker_argv(args, source, shard)) for shard in shards]
    exits = aio.run(run_workers(workers))
    return [e.returncode for e in exits], [shown_command(w.argv[1:]) for w in workers]


def _slurm_array(args: argparse.Namespace, exp: Any, source: Path, run_dir: Path) -> tuple[list[int], list[str]]:
    """The shards as one SLURM job array (serve.slurm_shards); (exit codes, where each task's log is)."""
    from userturn.serve.slurm_shards import SHARD, submit_shards, wait_for_shards

    command = worker_argv(args, source.resolve(), SHARD)
    array = submit_shards(command, args.workers, run_dir, name=exp.name, workdir=Path.cwd())
    where = array.job.run_dir
    print(f"userturn: submitted slurm job array {array.job.job_id} ({args.workers} shards; script "
          f"{where / 'shards.sbatch'}; logs {where}/{array.job.job_id}_I.log)", file=sys.stderr)
    codes = wait_for_shards(array, lambda line: print(f"userturn: {line}", file=sys.stderr, flush=True))
    return codes, [f"log {array.log(task)}" for task in range(1, args.workers + 1)]


def next_step(files: list[Path]) -> str:
    """How to report the shards of a run together: `report` reads the files as one (their folder holds only them)."""
    return f"next: userturn report {' '.join(shlex.quote(str(f)) for f in files)}"

