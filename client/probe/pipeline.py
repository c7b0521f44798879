"""The probe pipeline: conversations -> prompts ending at an open user header -> completions -> JSONL.

One `ProbeRun` covers one model on one dataset, one record per (item, perturbation, temperature, sample).
`concurrency` workers pull prepared samples (`Job`) from one generator that prepares them item by item as asked
(memory holds the items in flight, never the dataset); records stream to the results file, and keys already `ok`
there are skipped, so rerunning the same command resumes. Each configuration is written once as a configuration
line and every record carries its fingerprint; resuming a file whose records of the same condition were made with
other settings is refused before anything is written.

A run owns its parts, each built once from the settings: the `Plan` (planning.py: keys, resume checks, the items
still to do, partners), the `RequestBuilder` (requests.py: configurations, bodies, records, one sample's request),
the `AssistantTurns` (assistant_turns.py: the turn each item is probed with) and, while it runs, the `RecordWriter`
(writer.py). `ProbeRun` prepares jobs from them, runs the workers and counts. A sample whose first attempt timed
out goes behind every sample not yet tried (`RetryLater`): a few items a server never answers cannot fill every
worker, and a rerun reaches the items no run has tried yet.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointError
from userturn.client.http.redact import redact
from userturn.client.probe.assistant_turns import AssistantTurns
from userturn.client.probe.controls import Controls
from userturn.client.probe.perturb import PerturbationNotApplicable, Perturbed
from userturn.client.probe.perturbations import registry
from userturn.client.probe.perturbations.base import PARTNER_META
from userturn.client.probe.planning import Plan, Plans
from userturn.client.probe.progress import Progress, RunCounters, judge_endpoint_stats
from userturn.client.probe.requests import RequestBuilder
from userturn.client.probe.seeds import perturbation_seed
from userturn.client.probe.settings import (
    AssistantTurn,
    Job,
    JudgeHook,
    PerturbFn,
    ProbeSettings,
    ProbeSummary,
    Renderer,
    RoleFlipFn,
    ScoreFn,
    no_perturbation,
)
from userturn.client.probe.writer import RecordWriter
from userturn.client.render.special_tokens import check_items
from userturn.core.errors import RetryLater
from userturn.core.fingerprint import run_info
from userturn.core.records import ConfigLine, Message, ProbeRecord
from userturn.core.results_files import kept_in
from userturn.core.results_lock import results_lock
from userturn.core.resume_index import ResumeIndex, scan_results
from userturn.core.text import strip_reasoning
from userturn.core.workers import run_all


class ProbeRun:
    """One probe run: construct, then `await run()`. Raw mode needs `renderer`, chat mode `role_flip`.
    `partner_pool`: every item of the dataset (before --limit and shuffling), where partners (and the controls'
    shuffled turns) come from; default `items`. `resume_hint`: the advice ending the message that refuses a
    mismatched results file. `notices`: lines printed (stderr) once the run has passed its checks and starts
    generating."""

    def __init__(
        self,
        items: Iterable[DatasetItem],
        settings: ProbeSettings,
        *,
        endpoints: Sequence[Endpoint],
        renderer: Renderer | None,
        out_path: str,
        judge: JudgeHook | None = None,
        perturb: PerturbFn | None = None,
        scorer: ScoreFn | None = None,
        role_flip: RoleFlipFn | None = None,
        progress: bool = True,
        progress_title: str | None = None,
        partner_pool: Iterable[DatasetItem] | None = None,
        resume_hint: str = "use another --out",
        notices: Sequence[str] = (),
    ) -> None:
        self.settings = settings
        self.out_path = out_path
        self.endpoints = list(endpoints)
        next_endpoint = itertools.cycle(self.endpoints)  # one rotation for assistant turns and samples
        self.requests = RequestBuilder(settings, renderer=renderer, role_flip=role_flip, endpoints=next_endpoint)
        self.plan = Plan(items, settings, out_path=out_path, configs=self.requests.configs,
                         fingerprints=self.requests.fingerprints, partner_pool=partner_pool, resume_hint=resume_hint)
        self.assistant = AssistantTurns(settings, endpoints=next_endpoint, out_path=out_path,
                                        config=self.requests.configs[settings.perturbations[0]])
        self.renderer = self.requests.renderer  # raw mode's only
        self.judge = judge
        self.perturb = perturb or no_perturbation
        self.scorer = scorer
        self.notices = list(notices)
        self.counters = RunCounters()
        self.progress = Progress(
            self.counters,
            lambda: [e.stats for e in self.endpoints],
            judge_stats=lambda: judge_endpoint_stats(self.judge),
            title=progress_title or f"userturn probe {settings.model} on {settings.dataset}",
            enabled=progress,
        )
        self.controls = Controls(self.plan.items if partner_pool is None else partner_pool, dataset=settings.dataset,
                                 mode=settings.mode, seed=settings.seed) if settings.controls else None
        self._partners: Mapping[str, str] = {}
        self._judge_start = (0, 0, 0)  # the judge hook's counts when the run started (`_count_judged`)

    def check_resume(self, existing: ResumeIndex) -> None:
        """Refuse (ConfigMismatch, exit 2) a results file this run cannot resume (`Plan.check_resume`)."""
        self.plan.check_resume(existing)

    def _jobs(self, done: ResumeIndex, turns: dict[str, AssistantTurn]) -> Iterator[Job | ProbeRecord]:
        """Pending work in run order, prepared lazily item by item (the workers pull from this generator); items
        whose assistant turn failed give error records in their place. An item that cannot be prepared (a chat
        template that fails, a dataset line that changed) raises here, after the work of the items before it."""
        conditions = [(t, k) for t in self.settings.temperatures for k in range(self.settings.samples)]
        for item, plans in self.plan.unfinished(done, conditions, self.counters):
            yield from self._item_jobs(item, plans, turns, conditions)

    def _item_jobs(self, item: DatasetItem, plans: Plans, turns: dict[str, AssistantTurn],
                   conditions: list[tuple[float, int]]) -> list[Job | ProbeRecord]:
        """One item's jobs (one per pending sample of each perturbation, scored and rendered once), or its error
        records."""
        s, requests = self.settings, self.requests
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
                turn = self.assistant.turn(item, turns)
            context: dict[str, Any] = {"assistant_source": turn.source, "assistant_text": turn.text,
                                       "assistant_finish_reason": turn.finish_reason}
            partner = self._partners.get(item.id) if registry()[perturbation].needs_partner else None
            if partner is not None:
                context[PARTNER_META] = partner
            error = turn.error or ("no assistant turn" if turn.messages is None else None)
            if error is None and partner is not None and turns[partner].messages is None:
                error = f"{perturbation} partner {partner}: {turns[partner].error or 'no assistant turn'}"
            if error is not None or turn.messages is None:
                out.extend(requests.error_record(key, item, perturbation, t, k, turn.messages or [], error or "",
                                                 context) for t, k, key in keys)
                continue
            try:
                perturbed = list(turn.messages) if perturbation == "none" else self.perturb(
                    perturbation, turn.messages, seed=perturbation_seed(s.seed, item.id, perturbation),
                    pool=[turns[partner].messages] if partner is not None else [], gold=item.answer,
                )
                messages = perturbed.messages if isinstance(perturbed, Perturbed) else perturbed
                context["perturbation_detail"] = perturbed.detail if isinstance(perturbed, Perturbed) else None
            except PerturbationNotApplicable:
                self.counters.not_applicable += len(keys)  # e.g. wrong_answer on a text without a number
                continue
            except ValueError as exc:
                out.extend(requests.error_record(key, item, perturbation, t, k, turn.messages,
                                                 f"perturbation failed: {exc}", context) for t, k, key in keys)
                continue
            context["correct"], context["task_scores"] = self._score(item, messages)
            payload, prompt_sha256, estimate = requests.payload_base(messages)
            fields = requests.shared_fields(item, perturbation, messages, context)
            fields["prompt_sha256"] = prompt_sha256
            out.extend(Job(key, t, k, requests.seed(item.id, t, k, perturbation), payload, estimate, fields)
                       for t, k, key in keys)
        return out

    def _score(self, item: DatasetItem, messages: list[Message]) -> tuple[bool | None, dict[str, float] | None]:
        """Task accuracy of the assistant turn actually probed (after perturbation): (None, None) without a scorer,
        and without an assistant turn (`remove`)."""
        if self.scorer is None or not messages or messages[-1].role != "assistant":
            return None, None
        return self.scorer(self.settings.dataset, item, strip_reasoning(messages[-1].content))

    async def run(self) -> ProbeSummary:
        check_items(self.plan.items, self.requests.special_tokens, allow=self.settings.allow_special_tokens,
                    tokenizer=self.renderer.name if self.renderer is not None else self.settings.model)
        self.plan.check()
        with results_lock(self.out_path):  # exit 2 if another process writes this file; held through the run
            return await self._run_locked()

    async def _run_locked(self) -> ProbeSummary:
        existing = scan_results(self.out_path)  # streaming: key states and configurations, no records kept
        self.plan.check_resume(existing)  # before the writer opens the file: a refused file is left untouched
        control_keys = self.controls.keys() if self.controls is not None else []
        if self.controls is not None:
            self.controls.check_resume(existing, path=self.out_path, hint=self.plan.resume_hint)
        backlog = None
        if self.judge is not None:  # a panel finds what it still has to label (and refuses another panel's file)
            backlog = self.judge.pending_judgements(
                self.out_path, {k for k in itertools.chain(self.plan.iter_keys(), control_keys) if existing.is_ok(k)})
        planned = self.plan.size
        c = self.counters
        c.total = planned  # `_jobs` moves keys already ok from here to `skipped` as it reaches them
        c.skipped = 0
        run = run_info(scrub=redact).model_copy(update={"server": self.settings.engine_traits.described})
        info = self.renderer.info if self.renderer is not None else None
        requests = self.requests
        configs = {fp: ConfigLine(fingerprint=fp, config=requests.configs[p], renderer=info, run=run)
                   for p, fp in requests.fingerprints.items()}
        if self.controls is not None:
            configs.update(self.controls.config_lines(run))
        for notice in self.notices:  # what the run says about its engine, once it is known to start
            print(notice, file=sys.stderr, flush=True)
        writer = RecordWriter(self.out_path, configs)
        self._judge_start = self._judge_totals()  # a panel shared by several runs counts on: this run's part
        started = time.monotonic()
        self.progress.start()
        try:
            if backlog is not None and backlog.todo:
                records = backlog.records()  # one generator, pulled by every worker
                await run_all(self._judge_again(records, writer)
                              for _ in range(min(self.settings.concurrency, len(backlog.todo))))
            self._partners = self.plan.partners()
            turns = await self.assistant.collect(self.plan.items, self._partners, self.plan.pool_item)
            jobs = self._jobs(existing, turns)  # one generator, pulled by every worker: lazy, bounded
            later: deque[Job] = deque()  # samples whose first attempt timed out, sent again after the others
            await run_all(self._worker(jobs, later, writer) for _ in range(self.settings.concurrency))
            if self.controls is not None:  # no generation: the dataset's human turns, judged like any record
                await self._write_controls(self.controls.records(self.plan.items, existing,
                                                                  lambda item: self._conversation(item, turns)),
                                           writer)
                if self.controls.problem():
                    print(f"userturn: --controls: {self.controls.problem()}", file=sys.stderr, flush=True)
        except EndpointError as exc:
            if not exc.resumable:  # the command must change (a base URL that answers 404): no resume advice
                kept = f"; the {c.done} records of this run are kept in {self.out_path}" if c.done else ""
                raise EndpointError(f"{exc}{kept}", resumable=False) from None
            kept = kept_in(self.out_path) + (f" ({c.done} from this run)" if c.done else "")
            raise type(exc)(f"{exc}; {kept}: rerun the same command to resume") from None
        finally:
            await self.progress.stop()
            writer.close()  # a write error raises here
        return ProbeSummary(total=planned, skipped=c.skipped, ok=c.ok, errors=c.errors,
                            elapsed_s=time.monotonic() - started, judged=c.judged, judge_failures=c.judge_failures,
                            not_applicable=c.not_applicable, rejudged=len(backlog.todo) if backlog else 0)

    def _conversation(self, item: DatasetItem, turns: dict[str, AssistantTurn],
                      ) -> tuple[list[Message], str, str | None] | None:
        """The conversation a control of `item` is shown after: its unperturbed assistant turn (`Controls.records`)."""
        turn = self.assistant.turn(item, turns)
        if turn.messages is None or turn.error is not None:
            return None
        return list(turn.messages), turn.source, self.settings.model if turn.source == "model" else None

    async def _write_controls(self, records: Iterator[ProbeRecord], writer: RecordWriter) -> None:
        """Write the control records (`controls.py`), each judged first where the run judges inline."""
        if self.judge is None:
            for record in records:
                writer.write(record)
            return
        await run_all(self._judge_again(records, writer) for _ in range(self.settings.concurrency))

    async def _judge_again(self, records: Iterator[ProbeRecord], writer: RecordWriter) -> None:
        """Judge ok records of earlier runs that lack this judge's label; the generation is never redone."""
        assert self.judge is not None
        for record in records:
            record = await self.judge.judge(record)
            self._count_judged()
            writer.write(record)

    @staticmethod
    def _work(jobs: Iterator[Job | ProbeRecord], later: deque[Job]) -> Iterator[tuple[Job | ProbeRecord, int]]:
        """The next job and the attempts it already spent: the jobs not yet tried, then those put `later`."""
        for job in jobs:  # the workers share the generator: each takes the next job when it is free
            yield job, 0
        while later:
            yield later.popleft(), 1

    async def _worker(self, jobs: Iterator[Job | ProbeRecord], later: deque[Job], writer: RecordWriter) -> None:
        c = self.counters
        for job, tried in self._work(jobs, later):
            if isinstance(job, ProbeRecord):
                record = job
            else:
                try:
                    record = await self.requests.probe(job, tried=tried)
                except RetryLater:
                    later.append(job)
                    continue
            if self.judge is not None and record.status == "ok":
                try:
                    record = await self.judge.judge(record)
                except EndpointError:
                    writer.write(record)  # keep the generation; `userturn judge` can label it later
                    raise
                self._count_judged()
            writer.write(record)
            c.done += 1
            if record.status == "ok":
                c.ok += 1
            else:
                c.errors += 1

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
