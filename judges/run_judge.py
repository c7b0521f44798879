"""`userturn judge`: label the records of an existing results file, resumably, without regenerating. Both files
are streamed (key -> byte offset and what to do, `judges.backlog`) and records read back one at a time, so memory
grows with the number of keys, not with the size of the records.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

from userturn.client.probe.progress import Progress, RunCounters, judge_endpoint_stats
from userturn.core.errors import UserError
from userturn.core.jsonl import JsonlWriter, read_configs
from userturn.core.records import ProbeRecord
from userturn.core.results_files import judged_name
from userturn.core.text import digest
from userturn.core.workers import run_all
from userturn.judges.backlog import JudgingScan, TurnHead, read_record, record_heads, scan_judging
from userturn.judges.panel import JudgeCounters, JudgePanel, judge_failure_line

OUT_HINT = "use another --out, or pass --rejudge to label those records again with this panel"
# What to do with an input key, packed with its byte offset into one int (offset << 2 | action): 100,000 keys
# then cost one small int each instead of a tuple.
SKIP, CARRY, JUDGE = 0, 1, 2


@dataclass
class JudgeRunSummary:
    total: int
    already_done: int
    carried: int  # generation errors copied over unjudged
    counters: JudgeCounters
    elapsed_s: float
    out_path: Path
    kept: int = 0  # records labelled by the judges' verdicts they already carried (no request sent this run)
    requests: int = 0  # judge requests actually sent this run (retries apart)

    @property
    def newly_judged(self) -> int:
        """Records labelled by the judge panel with at least one verdict asked for in this run."""
        return self.counters.judged - self.kept


@dataclass
class InputPlan:
    """Per input key (its last line): byte offset and action, packed as `offset << 2 | action`."""

    entries: dict[bytes, int]  # digest of key -> packed (a string per key would double the memory at 1M keys)
    todo: int = 0
    carry: int = 0
    skipped: int = 0


def outputs(inputs: list[Path], out: Path | None, *, folder: bool) -> list[tuple[Path, Path]]:
    """(input, output) per input file: `out` itself for one file; with several inputs (`folder`), X.judged.jsonl
    in the folder `out`, or beside each input without `out`. Two inputs with one output, or an input that is
    another's output: UserError."""
    pairs = [(results, judged_name(results) if out is None else out / judged_name(results).name if folder else out)
             for results in inputs]
    taken: dict[Path, Path] = {}
    inputs_at = {results.resolve() for results in inputs}
    for results, judged in pairs:
        other = taken.setdefault(judged.resolve(), results)
        if other is not results:
            raise UserError(f"{other} and {results} would both be judged into {judged}: judge them apart "
                            "(--out to another folder)")
        if judged.resolve() in inputs_at:
            raise UserError(f"--out must differ from the results files ({judged} is one of them)")
    return pairs


def plan_input(results: Path, output: JudgingScan) -> InputPlan:
    """Read the input once, checking every line's JSON and the fields judging reads (`errors.damaged_line` naming
    path:line before any request; the rest of a record is checked when it is read back to be judged): a key is
    skipped when the output has it done with the same turn, a generation error is carried, the rest is judged."""
    entries: dict[bytes, int] = {}
    done = output.done
    for _, offset, head in record_heads(results, TurnHead):
        key = digest(head.key)
        if done.get(key) == digest(head.user_turn):
            action = SKIP
        elif head.status != "ok":
            action = CARRY
        else:
            action = JUDGE
        entries[key] = offset << 2 | action
    counts = Counter(packed & 3 for packed in entries.values())
    return InputPlan(entries, todo=counts[JUDGE], carry=counts[CARRY], skipped=counts[SKIP])


def work(results: Path, plan: InputPlan, output: JudgingScan, writer: JsonlWriter) -> Generator[ProbeRecord]:
    """The records to judge, in input order, read one at a time; generation errors are written as they pass."""
    offsets = sorted(packed for packed in plan.entries.values() if packed & 3 != SKIP)
    with contextlib.ExitStack() as stack:
        fh = stack.enter_context(results.open("rb"))
        out_fh = stack.enter_context(output.path.open("rb")) if output.todo else None
        for packed in offsets:
            record = read_record(fh, results, packed >> 2)
            if packed & 3 == CARRY:
                writer.write(record)
                continue
            previous = output.todo.get(record.key)
            if out_fh is not None and previous is not None and previous[1] == digest(record.user_turn):
                # Resume: keep the verdicts the output already has; the panel re-asks only missing or failed ones.
                record.judges = read_record(out_fh, output.path, previous[0]).judges
            yield record


async def judge_file(results: Path, out_path: Path, panel: JudgePanel, *, workers: int = 16,
                     progress: bool = True) -> JudgeRunSummary:
    """Judge every generated record of `results` into `out_path` (a pair from `outputs`), appending and resuming
    from what is there. UserError, before anything is sent or written, when the output holds labels of another
    judge panel (unless `rejudge`)."""
    output = scan_judging(out_path, panel.assess, keep_done=True)
    output.refuse_mix(panel.describe(), OUT_HINT)
    plan = plan_input(results, output)
    output.done.clear()  # only the input plan needs it
    started = time.monotonic()
    panel.counters = JudgeCounters()  # this file's counts (one panel judges several files in turn)
    await panel.check()
    writer = JsonlWriter(out_path)
    present = read_configs(out_path)
    for fingerprint, config in read_configs(results).items():  # the output describes its records' configurations
        if fingerprint not in present:
            writer.write_config(config)
    counters = RunCounters(total=plan.todo, skipped=plan.skipped)
    requests_before = sum(s.requests for s in judge_endpoint_stats(panel))  # the endpoint check's
    view = Progress(counters, lambda: [], judge_stats=lambda: judge_endpoint_stats(panel), title="userturn judge",
                    enabled=progress, kind="judge", requests_before=requests_before)
    records = work(results, plan, output, writer)

    async def worker() -> None:
        c = panel.counters
        for record in records:
            judged = await panel.judge(record)
            writer.write(judged)
            counters.done += 1
            counters.ok += 1
            if judged.label_source not in (None, "rule") and not asked_anew(record, judged):
                counters.kept += 1
            counters.judged, counters.rule_labels, counters.judge_failures = (c.judged - counters.kept, c.rule_labels,
                                                                              c.judge_failures)

    try:
        if plan.todo:  # nothing to judge: no view, the summary says so
            view.start()
        await run_all(worker() for _ in range(max(1, min(workers, plan.todo))))
    finally:
        records.close()
        if plan.todo:
            await view.stop()
        writer.close()
    return JudgeRunSummary(total=len(plan.entries), already_done=plan.skipped, carried=plan.carry,
                           counters=panel.counters, elapsed_s=time.monotonic() - started, out_path=out_path,
                           kept=counters.kept,
                           requests=sum(s.requests for s in judge_endpoint_stats(panel)) - requests_before)


def asked_anew(before: ProbeRecord, after: ProbeRecord) -> bool:
    """Whether the panel asked a judge for any verdict of `after` (a verdict object `before` did not carry)."""
    carried = {id(v) for v in before.judges}
    return any(id(v) not in carried for v in after.judges if v.source == "judge")


def print_summary(summary: JudgeRunSummary, *, hint: bool = True) -> int:
    """Print the run's summary (and, with `hint`, the report command for its output); the exit status: 1 when a
    generated record was left without a label, else 0."""
    c = summary.counters
    rate = c.followup_rate()
    rate_text = "n/a" if rate is None else f"{100 * rate:.1f}%"
    speed = summary.requests / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
    kept = (f", kept from the input {summary.kept} (their verdicts carried over, no request)" if summary.kept
            else "")
    print(f"userturn judge: {summary.total} records -> {summary.out_path}: newly judged {summary.newly_judged} "
          f"({summary.requests} judge requests, {speed:.1f} req/s){kept}, rule labels {c.rule_labels}, judge "
          f"failures {c.judge_failures}, generation errors carried {summary.carried}, already done "
          f"{summary.already_done}; follow-up rate of the records labelled in this run {rate_text} "
          f"({summary.elapsed_s:.1f}s)", file=sys.stderr)
    status = 0
    if c.judge_failures:
        print(judge_failure_line("userturn judge", c.judge_failures, str(summary.out_path), c), file=sys.stderr)
        status = 1
    if hint:
        print(f"next: userturn report {summary.out_path} (add --html report.html --plots figures/ for the figures)",
              file=sys.stderr)
    return status
