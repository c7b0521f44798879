"""`userturn judge`: label the records of an existing results file, resumably, without regenerating."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from userturn.client.errors import UserError
from userturn.client.jsonl import JsonlWriter, read_records
from userturn.client.records import ProbeRecord
from userturn.client.workers import run_all
from userturn.judges.panel import JudgeCounters, JudgePanel

PLAIN_PROGRESS_EVERY_S = 30.0


@dataclass
class JudgeRunSummary:
    total: int
    already_done: int
    carried: int  # generation errors copied over unjudged
    counters: JudgeCounters
    elapsed_s: float
    out_path: Path


def default_out_path(results: Path) -> Path:
    """RESULTS.jsonl -> RESULTS.judged.jsonl beside it."""
    stem = results.name[: -len(".jsonl")] if results.name.endswith(".jsonl") else results.name
    return results.with_name(f"{stem}.judged.jsonl")


def plan(inputs: dict[str, ProbeRecord], done: dict[str, ProbeRecord],
         panel: JudgePanel) -> tuple[list[ProbeRecord], list[ProbeRecord], int]:
    """(records to judge, generation errors to copy, keys already complete in the output)."""
    todo, carry, skipped = [], [], 0
    for key, record in inputs.items():
        previous = done.get(key)
        if previous is not None and previous.user_turn == record.user_turn and panel.is_done(previous):
            skipped += 1
        elif record.status != "ok":
            carry.append(record)
        elif previous is not None and previous.user_turn == record.user_turn:
            # Resume: keep the ok verdicts the output already has, re-ask only the missing or failed judges.
            merged = record.model_copy(deep=True)
            merged.judges = previous.judges
            todo.append(merged)
        else:
            todo.append(record)
    return todo, carry, skipped


def _status_text(c: JudgeCounters) -> str:
    rate = c.followup_rate()
    rate_text = "—" if rate is None else f"{100 * rate:.1f}%"
    return (f"judged {c.judged} · rules {c.rule_labels} · [red]judge failures {c.judge_failures}[/] · "
            f"follow-up rate {rate_text}")


async def judge_file(results: Path, out_path: Path, panel: JudgePanel, *, workers: int = 16,
                     progress: bool = True) -> JudgeRunSummary:
    """Judge every generated record of `results` into `out_path` (appending; resumes from what is there)."""
    if not results.is_file():
        raise UserError(f"results file not found: {results}")
    if out_path.resolve() == results.resolve():
        raise UserError(f"--out must differ from the results file ({results})")
    inputs, _ = read_records(results)
    done, _ = read_records(out_path)
    todo, carry, skipped = plan(inputs, done, panel)
    started = time.monotonic()
    await panel.check()
    writer = JsonlWriter(out_path)
    queue: asyncio.Queue[ProbeRecord] = asyncio.Queue()
    for record in todo:
        queue.put_nowait(record)
    bar = _progress(len(todo), progress)
    task_id = bar.add_task(_status_text(panel.counters), total=len(todo)) if bar else None
    last_line = time.monotonic()

    async def worker() -> None:
        nonlocal last_line
        while True:
            try:
                record = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            writer.write(await panel.judge(record))
            if bar is not None:
                bar.update(task_id, advance=1, description=_status_text(panel.counters))  # type: ignore[arg-type]
            elif time.monotonic() - last_line >= PLAIN_PROGRESS_EVERY_S:
                last_line = time.monotonic()
                c = panel.counters
                print(f"userturn judge: {c.judged + c.rule_labels + c.judge_failures}/{len(todo)} "
                      f"(judge failures {c.judge_failures})", file=sys.stderr, flush=True)

    try:
        for record in carry:
            writer.write(record)
        if bar is not None:
            bar.start()
        await run_all(worker() for _ in range(max(1, min(workers, len(todo)))))
    finally:
        if bar is not None:
            bar.stop()
        writer.close()
    return JudgeRunSummary(total=len(inputs), already_done=skipped, carried=len(carry), counters=panel.counters,
                           elapsed_s=time.monotonic() - started, out_path=out_path)


def _progress(total: int, enabled: bool) -> Progress | None:
    if not enabled or total == 0:
        return None
    return Progress(TextColumn("[bold]judging[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.description}"), console=Console(stderr=True), transient=False)


def print_summary(summary: JudgeRunSummary) -> None:
    c = summary.counters
    rate = c.followup_rate()
    rate_text = "n/a" if rate is None else f"{100 * rate:.1f}%"
    print(f"userturn judge: {summary.total} records -> {summary.out_path}: judged {c.judged}, rule labels "
          f"{c.rule_labels}, judge failures {c.judge_failures}, generation errors carried {summary.carried}, "
          f"already done {summary.already_done}; follow-up rate of this run {rate_text} "
          f"({summary.elapsed_s:.1f}s)", file=sys.stderr)
    if c.judge_failures:
        print(f"userturn judge: {c.judge_failures} records have no label (judge_status \"error\", raw reply kept); "
              "rerun the same command to retry them", file=sys.stderr)
