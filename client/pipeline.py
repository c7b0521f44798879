"""The probe pipeline: conversations -> prompts ending at an open user header -> completions -> JSONL.

One `run_probe` call covers one model on one dataset: every (item, perturbation, temperature, sample)
becomes one record. Work is spread over a fixed pool of `concurrency` workers (no task per sample),
prompts are rendered once per (item, perturbation), records stream to the results file as they finish,
and keys already `ok` in that file are skipped, so rerunning the same command resumes.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, Field, ValidationError
from userturn.client.dataset import DatasetItem
from userturn.client.endpoint import Endpoint, EndpointError, RequestFailed
from userturn.client.errors import UserError, first_error
from userturn.client.jsonl import JsonlWriter
from userturn.client.perturb import PerturbationNotApplicable
from userturn.client.progress import Progress, RunCounters
from userturn.client.ratelimit import RateLimiter
from userturn.client.records import Message, ProbeRecord, ok_record_line, record_key, sha256_text, shared_json
from userturn.client.resume_index import ResumeIndex, scan_results
from userturn.client.seeds import sample_seed
from userturn.client.workers import run_all

THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


class Renderer(Protocol):
    """What the pipeline needs from a chat-template renderer (client.templates.PromptRenderer)."""

    template_sha256: str
    stop: list[str]
    stop_token_ids: list[int]

    def user_turn_prompt(self, messages: list[Message]) -> str: ...

    def count_tokens(self, text: str) -> int | None: ...


class JudgeHook(Protocol):
    async def judge(self, record: ProbeRecord) -> ProbeRecord: ...


PerturbFn = Callable[..., list[Message]]
ScoreFn = Callable[[str, DatasetItem, str], tuple[bool | None, dict[str, float] | None]]
RoleFlipFn = Callable[[list[Message]], list[Message]]


class ProbeSettings(BaseModel):
    """Everything that decides what is sent; part of the run's identity."""

    model: str
    dataset: str
    temperatures: list[float] = Field(default_factory=lambda: [0.0])
    samples: int = Field(default=1, ge=1)
    max_tokens: int = Field(default=256, ge=1)
    seed: int = 0
    top_p: float | None = None
    perturbations: list[str] = Field(default_factory=lambda: ["none"])
    mode: Literal["raw", "chat"] = "raw"
    assistant_from: Literal["dataset", "model"] = "dataset"
    assistant_temperature: float = 0.0
    assistant_max_tokens: int = Field(default=1024, ge=1)
    send_stop_token_ids: bool = False
    extra_stop: list[str] = Field(default_factory=list, description="stops added to the template-derived ones")
    extra_stop_token_ids: list[int] = Field(default_factory=list)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    concurrency: int = Field(default=64, ge=1)
    rpm: float | None = None
    tpm: float | None = None


@dataclass(slots=True)
class Job:
    """One sample to request. `shared` holds the record fields common to its (item, perturbation)."""

    key: str
    temperature: float
    sample: int
    seed: int
    body_prefix: bytes  # the request body up to the per-sample fields (see ProbeRun._body_prefix)
    estimated_tokens: int
    shared: dict[str, Any]
    shared_json: dict[str, Any] | None  # `shared` in JSON form, for fast ok lines (None when a judge needs models)


@dataclass
class ProbeSummary:
    total: int
    skipped: int
    ok: int
    errors: int
    elapsed_s: float
    judged: int = 0
    judge_failures: int = 0
    not_applicable: int = 0

    @property
    def req_per_s(self) -> float:
        return (self.ok + self.errors) / self.elapsed_s if self.elapsed_s else 0.0


@dataclass
class AssistantTurn:
    """The assistant turn an item is probed with, plus its task score."""

    messages: list[Message] | None
    source: Literal["dataset", "model", "none"]
    error: str | None = None
    correct: bool | None = None
    task_scores: dict[str, float] | None = None
    text: str | None = None


def strip_reasoning(text: str) -> str:
    """Drop <think> blocks (and a dangling leading </think>) from a completion."""
    text = THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = text.split("</think>", 1)[1]
    return text.strip()


def clean_user_turn(text: str, stops: Sequence[str]) -> str:
    """The generated user turn without a trailing stop string some servers echo back."""
    for stop in stops:
        if stop and text.endswith(stop):
            text = text[: -len(stop)]
    return text


def _default_perturb(name: str, messages: list[Message], **_: Any) -> list[Message]:
    if name != "none":
        raise ValueError(f"no perturbation function for {name!r}")
    return messages


class ProbeRun:
    """One probe run. Construct, then `await run()`."""

    def __init__(
        self,
        items: Sequence[DatasetItem],
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
    ) -> None:
        if settings.mode == "raw" and renderer is None:
            raise ValueError("raw mode needs a chat-template renderer")
        if settings.mode == "chat" and role_flip is None:
            raise ValueError("chat mode needs a role-flip function")
        self.items = items if isinstance(items, Sequence) else list(items)  # may stay on disk (JsonlItems)
        self.settings = settings
        self.endpoints = list(endpoints)
        self._next_endpoint = itertools.cycle(self.endpoints)
        self.renderer = renderer
        self.out_path = out_path
        self.judge = judge
        self.perturb = perturb or _default_perturb
        self.scorer = scorer
        self.role_flip = role_flip
        self.limiter = RateLimiter(settings.rpm, settings.tpm)
        self.counters = RunCounters()
        self.progress = Progress(
            self.counters,
            lambda: [e.stats for e in self.endpoints],
            title=progress_title or f"userturn probe {settings.model} on {settings.dataset}",
            enabled=progress,
        )
        self._path = "chat/completions" if settings.mode == "chat" else "completions"
        self._send_temperature = "temperature" not in settings.extra_body
        self._send_seed = "seed" not in settings.extra_body
        self._stops: list[str] = []
        self._stop_ids: list[int] = []
        if renderer is not None and settings.mode == "raw":
            self._stops = list(dict.fromkeys([*renderer.stop, *settings.extra_stop]))
            self._stop_ids = list(dict.fromkeys([*renderer.stop_token_ids, *settings.extra_stop_token_ids]))

    # ----- planning -------------------------------------------------------------------------------------------
    def _check_plan(self) -> None:
        """No sample planned twice: the keys of one item are distinct, and so are the item ids."""
        s = self.settings
        ids = getattr(self.items, "ids", None) or [item.id for item in self.items]
        if not ids:
            return
        one = [record_key(s.model, s.dataset, ids[0], p, t, k, s.mode)
               for p in s.perturbations for t in s.temperatures for k in range(s.samples)]
        if len(set(one)) != len(one):
            raise UserError("the same sample is planned twice: repeated --temperature or --perturb values")
        if len(set(ids)) != len(ids):
            raise UserError("the same sample is planned twice: two items share an id")

    def _payload_base(self, messages: list[Message]) -> tuple[dict[str, Any], str, int]:
        s = self.settings
        if s.mode == "chat":
            assert self.role_flip is not None
            flipped = self.role_flip(messages)
            dumped = [m.model_dump(exclude_none=True) for m in flipped]
            payload: dict[str, Any] = {"model": s.model, "messages": dumped, "max_tokens": s.max_tokens}
            text = orjson.dumps(dumped).decode()
            return payload, sha256_text(text), (len(text) // 4 + s.max_tokens) if s.tpm else 0
        assert self.renderer is not None
        prompt = self.renderer.user_turn_prompt(messages)
        payload = {"model": s.model, "prompt": prompt, "max_tokens": s.max_tokens, "stop": self._stops}
        if s.send_stop_token_ids and self._stop_ids:
            payload["stop_token_ids"] = self._stop_ids
        estimate = 0
        if s.tpm:
            counted = self.renderer.count_tokens(prompt)
            estimate = (counted if counted is not None else len(prompt) // 4) + s.max_tokens
        return payload, sha256_text(prompt), estimate

    def _jobs(self, done: ResumeIndex, turns: dict[str, AssistantTurn]) -> Iterator[Job | ProbeRecord]:
        """Pending work in order; items whose assistant turn failed yield error records directly.

        Items are read one at a time (they may stay on disk); only `swap` needs every item's conversation at
        once, so the pool of conversations is built only when it is planned."""
        s = self.settings
        pool: list[list[Message]] = []
        if "swap" in s.perturbations:
            pool = [t.messages for t in (self._turn(i, turns) for i in self.items) if t.messages is not None]
        conditions = [(t, k) for t in s.temperatures for k in range(s.samples)]
        for index, item in enumerate(self.items):
            turn: AssistantTurn | None = None
            for perturbation in s.perturbations:
                all_keys = [record_key(s.model, s.dataset, item.id, perturbation, t, k, s.mode) for t, k in conditions]
                pending = done.pending(all_keys)
                if len(pending) < len(all_keys):
                    self.counters.skipped += len(all_keys) - len(pending)
                    self.counters.total -= len(all_keys) - len(pending)
                if not pending:
                    continue
                keys = [(*conditions[i], all_keys[i]) for i in pending]
                if turn is None:
                    turn = self._turn(item, turns)
                context = {"assistant_source": turn.source, "correct": turn.correct,
                           "task_scores": turn.task_scores, "assistant_text": turn.text}
                if turn.messages is None:
                    for t, k, key in keys:
                        yield self._error_record(key, item, perturbation, t, k, [], turn.error or "no assistant turn",
                                                 context)
                    continue
                try:
                    messages = self.perturb(
                        perturbation, turn.messages, seed=sample_seed(s.seed, item.id, 0, index, perturbation),
                        pool=pool,
                    )
                except PerturbationNotApplicable:
                    self.counters.not_applicable += len(keys)  # e.g. wrong_answer on a text without a number
                    continue
                except ValueError as exc:
                    for t, k, key in keys:
                        yield self._error_record(key, item, perturbation, t, k, turn.messages,
                                                 f"perturbation failed: {exc}", context)
                    continue
                payload, prompt_sha, estimate = self._payload_base(messages)
                shared = self._shared_fields(item, perturbation, messages, context)
                shared["prompt_sha256"] = prompt_sha
                base = shared_json(shared) if self.judge is None else None
                prefix = self._body_prefix(payload)
                for t, k, key in keys:
                    seed = sample_seed(s.seed, item.id, t, k, perturbation, s.mode)
                    yield Job(key, t, k, seed, prefix, estimate, shared, base)

    # ----- records --------------------------------------------------------------------------------------------
    def _shared_fields(self, item: DatasetItem, perturbation: str, messages: list[Message],
                       context: dict[str, Any]) -> dict[str, Any]:
        """Record fields shared by every sample of one (item, perturbation)."""
        s = self.settings
        meta = dict(item.meta or {})
        if context.get("assistant_source") == "model" and context.get("assistant_text") is not None:
            meta["assistant_turn"] = context["assistant_text"]
        return {
            "model": s.model, "dataset": s.dataset, "item_id": item.id, "mode": s.mode,
            "perturbation": perturbation, "messages": messages,
            "assistant_source": context.get("assistant_source", "dataset"),
            "template_sha256": self.renderer.template_sha256 if (self.renderer and s.mode == "raw") else None,
            "reference_answer": item.answer, "correct": context.get("correct"),
            "task_scores": context.get("task_scores"), "meta": meta or None,
        }

    def _error_record(self, key: str, item: DatasetItem, perturbation: str, temperature: float, sample: int,
                      messages: list[Message], error: str, context: dict[str, Any]) -> ProbeRecord:
        s = self.settings
        return ProbeRecord(
            **self._shared_fields(item, perturbation, messages, context), key=key, temperature=temperature,
            sample=sample, seed=sample_seed(s.seed, item.id, temperature, sample, perturbation, s.mode),
            status="error", error=error, attempts=0,
        )

    # ----- the assistant turn ---------------------------------------------------------------------------------
    async def _assistant_turns(self, reuse: dict[str, str]) -> dict[str, AssistantTurn]:
        """Each item's assistant turn; with --assistant-from model, `reuse` holds answers a previous run got."""
        s = self.settings
        turns: dict[str, AssistantTurn] = {}
        needed: list[DatasetItem] = []
        if s.assistant_from == "dataset":
            return turns  # each item's own final turn, taken when the item is probed (`_turn`)
        for item in self.items:
            if item.id in reuse:
                turns[item.id] = self._with_answer(item, reuse[item.id])
            else:
                needed.append(item)
        if needed:
            results = await self._fan_out(needed, self._answer)
            for item, turn in zip(needed, results, strict=True):
                turns[item.id] = turn
        return turns

    def _turn(self, item: DatasetItem, turns: dict[str, AssistantTurn]) -> AssistantTurn:
        """The assistant turn `item` is probed with: generated earlier (`turns`), or its dataset's own."""
        turn = turns.get(item.id)
        if turn is not None:
            return turn
        if item.ends_with_assistant:
            return self._scored(item, list(item.messages), "dataset", item.messages[-1].content)
        return AssistantTurn(None, "dataset", error="conversation does not end with an assistant turn (use "
                                                    "--assistant-from model)")

    def _history(self, item: DatasetItem) -> list[Message]:
        """The conversation the model answers: everything up to (not including) a final assistant turn."""
        return list(item.messages[:-1]) if item.ends_with_assistant else list(item.messages)

    def _with_answer(self, item: DatasetItem, text: str, reasoning: str | None = None) -> AssistantTurn:
        extra = {"reasoning_content": reasoning} if reasoning else {}
        messages = [*self._history(item), Message(role="assistant", content=text, **extra)]
        return self._scored(item, messages, "model", text)

    def _scored(self, item: DatasetItem, messages: list[Message], source: Literal["dataset", "model"],
                text: str) -> AssistantTurn:
        correct, scores = (None, None)
        if self.scorer is not None:
            correct, scores = self.scorer(self.settings.dataset, item, strip_reasoning(text))
        return AssistantTurn(messages, source, correct=correct, task_scores=scores, text=text)

    async def _answer(self, item: DatasetItem) -> AssistantTurn:
        s = self.settings
        history = self._history(item)
        payload = {
            "model": s.model,
            "messages": [m.model_dump(exclude_none=True) for m in history],
            "temperature": s.assistant_temperature,
            "max_tokens": s.assistant_max_tokens,
            "seed": sample_seed(s.seed, item.id, s.assistant_temperature, 0, "assistant"),
            **s.extra_body,
        }
        try:
            result = await next(self._next_endpoint).post_json("chat/completions", payload)
            message = result.data["choices"][0]["message"]
            content = message.get("content") or ""
        except RequestFailed as exc:
            return AssistantTurn(None, "model", error=f"assistant turn failed: {exc.reason}")
        except (KeyError, IndexError, TypeError):
            return AssistantTurn(None, "model", error="assistant turn failed: malformed chat completion")
        reasoning = message.get("reasoning_content")
        if "<think>" in content or "</think>" in content:
            match = re.search(r"<think>(.*?)</think>", content, re.DOTALL)
            reasoning = reasoning or (match.group(1).strip() if match else None)
            content = strip_reasoning(content)
        return self._with_answer(item, content, reasoning)

    # ----- the probe ------------------------------------------------------------------------------------------
    async def _probe(self, job: Job) -> ProbeRecord | bytes:
        """One sample's record: an ok record as a ready JSON line (fast path), else a `ProbeRecord`."""
        s = self.settings
        body = job.body_prefix
        if self._send_temperature:
            body += b',"temperature":' + orjson.dumps(job.temperature)
        if self._send_seed:
            body += b',"seed":%d' % job.seed
        body += b"}"
        if self.limiter.active:
            await self.limiter.acquire(job.estimated_tokens)
        endpoint = next(self._next_endpoint)
        try:
            result = await endpoint.post_json(self._path, body)
        except RequestFailed as exc:
            return ProbeRecord(**self._fields(job), status="error", error=exc.reason, attempts=exc.attempts)
        try:
            choice = result.data["choices"][0]
            text = strip_reasoning(choice["message"].get("content") or "") if s.mode == "chat" else choice["text"]
            if not isinstance(text, str):
                raise TypeError("text is not a string")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            return ProbeRecord(**self._fields(job), status="error", error=f"malformed completion body ({exc})",
                               attempts=result.attempts, latency_s=result.latency_s)
        usage = result.data.get("usage")
        if isinstance(usage, dict):
            stats = endpoint.stats
            prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if type(prompt_tokens) is int:  # counts of another type are left to the record's validation
                stats.prompt_tokens += prompt_tokens
            if type(completion_tokens) is int:
                stats.completion_tokens += completion_tokens
            if self.limiter.tokens is not None:
                total = usage.get("total_tokens")
                self.limiter.settle(job.estimated_tokens, total if type(total) is int else None)
        else:
            usage = None
        user_turn = clean_user_turn(text, self._stops)
        latency = round(result.latency_s, 6)
        if job.shared_json is not None:
            line = ok_record_line(
                job.shared_json, key=job.key, temperature=job.temperature, sample=job.sample, seed=job.seed,
                user_turn=user_turn, finish_reason=choice.get("finish_reason"),
                matched_stop=choice.get("matched_stop"), usage=usage, latency_s=latency, attempts=result.attempts,
            )
            if line is not None:
                return line
        fields = self._fields(job)
        try:
            return ProbeRecord(**fields, user_turn=user_turn, finish_reason=choice.get("finish_reason"),
                               matched_stop=choice.get("matched_stop"), status="ok", usage=usage, latency_s=latency,
                               attempts=result.attempts)
        except ValidationError as exc:
            return ProbeRecord(**fields, status="error", attempts=result.attempts, latency_s=latency,
                               error=f"malformed completion body ({first_error(exc)})")

    def _body_prefix(self, payload_base: dict[str, Any]) -> bytes:
        """The request body of one (item, perturbation) without its closing brace, serialised once: every sample
        appends its temperature and seed, unless --extra-body sets them (the user's extra body wins)."""
        s = self.settings
        fixed = dict(payload_base)
        if s.top_p is not None:
            fixed["top_p"] = s.top_p
        fixed.update(s.extra_body)
        return orjson.dumps(fixed)[:-1]

    @staticmethod
    def _fields(job: Job) -> dict[str, Any]:
        """The record fields known before the request (for records built as models, off the fast path)."""
        return {**job.shared, "key": job.key, "temperature": job.temperature, "sample": job.sample, "seed": job.seed}

    async def _fan_out(self, inputs: Sequence[Any], work: Callable[[Any], Any]) -> list[Any]:
        """Run `work` over inputs with the concurrency limit, preserving order."""
        results: list[Any] = [None] * len(inputs)
        feed = iter(enumerate(inputs))

        async def worker() -> None:
            for index, value in feed:
                results[index] = await work(value)

        await run_all(worker() for _ in range(min(self.settings.concurrency, len(inputs))))
        return results

    async def run(self) -> ProbeSummary:
        self._check_plan()
        writer = JsonlWriter(self.out_path, per_tick=True)  # takes the file's lock before anything is read
        try:
            existing = scan_results(self.out_path, assistant_turns=self.settings.assistant_from == "model")
        except BaseException:
            writer.close()
            raise
        s = self.settings
        planned = len(self.items) * len(s.perturbations) * len(s.temperatures) * s.samples
        c = self.counters
        c.total = planned  # `_jobs` moves keys already ok from here to `skipped` as it reaches them
        c.skipped = 0
        started = time.monotonic()
        self.progress.start()
        try:
            turns = await self._assistant_turns(existing.assistant_turns)
            jobs = self._jobs(existing, turns)
            await run_all(self._worker(jobs, writer) for _ in range(self.settings.concurrency))
        finally:
            await self.progress.stop()
            writer.close()
        return ProbeSummary(total=planned, skipped=c.skipped, ok=c.ok, errors=c.errors,
                            elapsed_s=time.monotonic() - started, judged=c.judged, judge_failures=c.judge_failures,
                            not_applicable=c.not_applicable)

    async def _worker(self, jobs: Iterator[Job | ProbeRecord], writer: JsonlWriter) -> None:
        c = self.counters
        for job in jobs:
            record = job if isinstance(job, ProbeRecord) else await self._probe(job)
            if type(record) is bytes:  # an ok record, already serialised
                writer.write_line(record)
                c.done += 1
                c.ok += 1
                continue
            if self.judge is not None and record.status == "ok":
                try:
                    judged = await self.judge.judge(record)
                except EndpointError:
                    writer.write(record)  # keep the generation; `userturn judge` can label it later
                    raise
                record = judged
                self._count_judged(record)
            writer.write(record)
            c.done += 1
            if record.status == "ok":
                c.ok += 1
            else:
                c.errors += 1

    def _count_judged(self, record: ProbeRecord) -> None:
        c = self.counters
        if record.label_source == "rule":
            c.rule_labels += 1
        elif record.judge_status == "error":
            c.judge_failures += 1
        elif record.label is not None:
            c.judged += 1


async def run_probe(items: Sequence[DatasetItem], settings: ProbeSettings, **kwargs: Any) -> ProbeSummary:
    """Convenience wrapper: `await run_probe(items, settings, endpoints=..., renderer=..., out_path=...)`."""
    return await ProbeRun(items, settings, **kwargs).run()


__all__ = ["EndpointError", "ProbeRun", "ProbeSettings", "ProbeSummary", "run_probe"]
