"""The probe pipeline: conversations -> prompts ending at an open user header -> completions -> JSONL.

One `ProbeRun` covers one model on one dataset, one record per (item, perturbation, temperature, sample).
`concurrency` workers pull prepared samples (`Job`) from one generator that prepares them item by item as asked
(memory holds the items in flight, never the dataset); records stream to the results file, and keys already `ok`
there are skipped, so rerunning the same command resumes. Each configuration is written once as a configuration
line and every record carries its fingerprint; resuming a file whose records of the same condition were made with
other settings is refused before anything is written.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import EndpointError
from userturn.client.http.redact import redact
from userturn.client.probe.assistant_turns import AssistantTurns
from userturn.client.probe.perturb import PerturbationNotApplicable, Perturbed
from userturn.client.probe.perturbations import registry
from userturn.client.probe.perturbations.base import PARTNER_META
from userturn.client.probe.seeds import sample_seed
from userturn.client.probe.settings import AssistantTurn, Job, ProbeSettings, ProbeSummary
from userturn.client.render.special_tokens import check_items

from userturn.core.fingerprint import run_info
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ConfigLine, ProbeRecord
from userturn.core.results_lock import results_lock
from userturn.core.resume_index import ResumeIndex, scan_results
from userturn.core.workers import run_all


class ProbeRun(AssistantTurns):
    """One probe run. Construct (arguments: `RunState.__init__`), then `await run()`."""

    _judge_start: tuple[int, int, int] = (0, 0, 0)  # the judge hook's counts when the run started (`_count_judged`)

    def _jobs(self, done: ResumeIndex, turns: dict[str, AssistantTurn]) -> Iterator[Job | ProbeRecord]:
        """Pending work in run order, prepared lazily item by item (the workers pull from this generator); items
        whose assistant turn failed give error records in their place. An item that cannot be prepared (a chat
        template that fails, a dataset line that changed) raises here, after the work of the items before it."""
        conditions = [(t, k) for t in self.settings.temperatures for k in range(self.settings.samples)]
        for item, plans in self._unfinished_items(done, conditions):
            yield from self._item_jobs(item, plans, turns, conditions)

    def _item_jobs(self, item: DatasetItem, plans: list[tuple[str, list[str], list[int]]],
                   turns: dict[str, AssistantTurn], conditions: list[tuple[float, int]]) -> list[Job | ProbeRecord]:
        """One item's jobs (one per pending sample of each perturbation, scored and rendered once), or its error
        records."""
        s = self.settings
        turn: AssistantTurn | None = None
        out: list[Job | ProbeRecord] = []
        for perturbation, all_keys, pending in plans:
            if len(pending) < len(all_keys):  # already ok: counted as skipped when reached
                self.counters.skipped += len(all_keys) - len(pending)
                self.counters.total -= len(all_keys) - len(pending)
            if not pending:
                continue
            keys = [(*conditions[i], all_keys[i]) for i in pending]
            if turn is None:
                turn = self._turn(item, turns)
            context: dict[str, Any] = {"assistant_source": turn.source, "assistant_text": turn.text,
                                       "assistant_finish_reason": turn.finish_reason}
            partner = self._partners.get(item.id) if registry()[perturbation].needs_partner else None
            if partner is not None:
                context[PARTNER_META] = partner
            error = turn.error or ("no assistant turn" if turn.messages is None else None)
            if error is None and partner is not None and turns[partner].messages is None:
                error = f"{perturbation} partner {partner}: {turns[partner].error or 'no assistant turn'}"
            if error is not None or turn.messages is None:
                out.extend(self._error_record(key, item, perturbation, t, k, turn.messages or [], error or "",
                                              context) for t, k, key in keys)
                continue
            try:
                # Keyed by the item's identity only: the same wrong answer or partner under any --limit/shuffle.
                perturbed = list(turn.messages) if perturbation == "none" else self.perturb(
                    perturbation, turn.messages, seed=sample_seed(s.seed, item.id, 0, 0, perturbation),
                    pool=[turns[partner].messages] if partner is not None else [], gold=item.answer,
                )
                messages = perturbed.messages if isinstance(perturbed, Perturbed) else perturbed
                context["perturbation_detail"] = perturbed.detail if isinstance(perturbed, Perturbed) else None
            except PerturbationNotApplicable:
                self.counters.not_applicable += len(keys)  # e.g. wrong_answer on a text without a number
                continue
            except ValueError as exc:
                out.extend(self._error_record(key, item, perturbation, t, k, turn.messages,
                                              f"perturbation failed: {exc}", context) for t, k, key in keys)
                continue
            context["correct"], context["task_scores"] = self._score(item, messages)
            payload, prompt_sha256, estimate = self._payload_base(messages)
            fields = self._shared_fields(item, perturbation, messages, context)
            fields["prompt_sha256"] = prompt_sha256
            out.extend(Job(key, t, k, self._seed(item.id, t, k, perturbation), payload, estimate, fields)
                       for t, k, key in keys)
        return out

    async def run(self) -> ProbeSummary:
        check_items(self.items, self.special_tokens, allow=self.settings.allow_special_tokens,
                    tokenizer=getattr(self.renderer, "name", self.settings.model))
        self._check_plan()
        with results_lock(self.out_path):  # exit 2 if another process writes this file; held through the run
            return await self._run_locked()

    async def _run_locked(self) -> ProbeSummary:
        existing = scan_results(self.out_path)  # streaming: key states and configurations, no records kept
        self.check_resume(existing)  # before the writer opens the file: a refused file is left untouched
        backlog = None
        pending = getattr(self.judge, "pending_judgements", None)  # a panel finds what it still has to label
        if pending is not None:  # (it refuses a file labelled by another panel)
            backlog = pending(self.out_path, {k for k in self.iter_keys() if existing.is_ok(k)})
        s = self.settings
        planned = len(self._ids()) * len(s.perturbations) * len(s.temperatures) * s.samples
        c = self.counters
        c.total = planned  # `_jobs` moves keys already ok from here to `skipped` as it reaches them
        c.skipped = 0
        run = run_info(scrub=redact)
        info = getattr(self.renderer, "info", None) if self.settings.mode == "raw" else None
        self._unwritten = {fp: ConfigLine(fingerprint=fp, config=self.configs[p], renderer=info, run=run)
                           for p, fp in self.fingerprints.items()}
        for notice in self.notices:  # what the run says about its engine, once it is known to start
            print(notice, file=sys.stderr, flush=True)
        writer = JsonlWriter(self.out_path, per_tick=True)
        self._judge_start = self._judge_totals()  # a panel shared by several runs counts on: this run's part
        started = time.monotonic()
        self.progress.start()
        try:
            if backlog is not None and backlog.todo:
                records = backlog.records()  # one generator, pulled by every worker
                await run_all(self._judge_again(records, writer)
                              for _ in range(min(self.settings.concurrency, len(backlog.todo))))
            turns = await self._assistant_turns()
            jobs = self._jobs(existing, turns)  # one generator, pulled by every worker: lazy, bounded
            await run_all(self._worker(jobs, writer) for _ in range(self.settings.concurrency))
        except EndpointError as exc:
            raise type(exc)(f"{exc}; completed records are kept in {self.out_path} ({c.done} from this run): "
                            "rerun the same command to resume") from None
        finally:
            await self.progress.stop()
            writer.close()  # a write error raises here
        return ProbeSummary(total=planned, skipped=c.skipped, ok=c.ok, errors=c.errors,
                            elapsed_s=time.monotonic() - started, judged=c.judged, judge_failures=c.judge_failures,
                            not_applicable=c.not_applicable, rejudged=len(backlog.todo) if backlog else 0)

    async def _judge_again(self, records: Iterator[ProbeRecord], writer: JsonlWriter) -> None:
        """Judge ok records of earlier runs that lack this judge's label; the generation is never redone."""
        assert self.judge is not None
        for record in records:
            record = await self.judge.judge(record)
            self._count_judged()
            self._write(writer, record)

    async def _worker(self, jobs: Iterator[Job | ProbeRecord], writer: JsonlWriter) -> None:
        c = self.counters
        for job in jobs:  # the workers share the generator: each takes the next job when it is free
            record = job if isinstance(job, ProbeRecord) else await self._probe(job)
            if self.judge is not None and record.status == "ok":
                try:
                    record = await self.judge.judge(record)
                except EndpointError:
                    self._write(writer, record)  # keep the generation; `userturn judge` can label it later
                    raise
                self._count_judged()
            self._write(writer, record)
            c.done += 1
            if record.status == "ok":
                c.ok += 1
            else:
                c.errors += 1

    def _write(self, writer: JsonlWriter, record: ProbeRecord) -> None:
        """Write `record`, after its configuration line when it is this run's first record of that configuration."""
        if record.config_fingerprint in self._unwritten:
            writer.write_config(self._unwritten.pop(record.config_fingerprint))
        writer.write(record)

    def _judge_totals(self) -> tuple[int, int, int]:
        """(judged, judge failures, rule labels) the judge hook has counted so far."""
        if self.judge is None:
            return 0, 0, 0
        counts = self.judge.counters
        return counts.judged, counts.judge_failures, counts.rule_labels

    def _count_judged(self) -> None:
        """This run's judge counts: what the judge hook counted since the run started."""
        c = self.counters
        now, start = self._judge_totals(), self._judge_start
        c.judged, c.judge_failures, c.rule_labels = (a - b for a, b in zip(now, start, strict=True))


__all__ = ["EndpointError", "ProbeRun", "ProbeSettings", "ProbeSummary"]
