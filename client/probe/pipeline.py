"""The probe pipeline: conversations -> prompts ending at an open user header -> completions -> JSONL.

One `run_probe` call covers one model on one dataset: every (item, perturbation, temperature, sample)
becomes one record. A fixed pool of `concurrency` worker tasks takes prepared samples (`Job`: prompt rendered
once per (item, perturbation), the request body and record fields the samples share) from one generator that
prepares them lazily, item by item, as workers ask (memory holds the items in flight, never the dataset); records
stream to the results file as they finish, and keys already `ok` in that file are skipped, so rerunning the same
command resumes. Each configuration is written once as a configuration line of the results file and every record
carries its fingerprint (userturn.core.fingerprint); resuming into a file whose records of the same condition were made
with other settings is refused before anything is written.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, Field, ValidationError
from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointError, RequestFailed, response_cap_for
from userturn.client.http.ratelimit import RateLimiter
from userturn.client.http.redact import redact
from userturn.client.probe.perturb import PerturbationNotApplicable, Perturbed, SwapRing
from userturn.client.probe.progress import Progress, RunCounters, judge_endpoint_stats
from userturn.client.probe.seeds import sample_seed
from userturn.client.render.special_tokens import SpecialTokens, check_items

from userturn.core.errors import UserError, first_error
from userturn.core.fingerprint import (
    ASSISTANT_SETTINGS,
    ConfigMismatch,
    ExistingConfigs,
    GenerationConfig,
    fingerprint,
    run_info,
)
from userturn.core.jsonl import JsonlWriter, config_line, iter_lines, legacy_config
from userturn.core.records import (
    ConfigLine,
    Message,
    ProbeRecord,
    check_key_format,
    condition_suffix,
    key_prefix,
    key_prefixes,
    record_key,
    sha256_text,
)
from userturn.core.results_lock import results_lock
from userturn.core.resume_index import ResumeIndex, scan_results
from userturn.core.text import strip_reasoning
from userturn.core.workers import run_all


class Renderer(Protocol):
    """What the pipeline needs from a chat-template renderer (client.render.templates.PromptRenderer)."""

    template_sha256: str
    stop: list[str]
    stop_token_ids: list[int]

    def user_turn_prompt(self, messages: list[Message], *, cache: bool = True) -> str: ...

    def count_tokens(self, text: str, *, cache: bool = True) -> int | None: ...


class JudgeHook(Protocol):
    """Labels a record as it is written (a `userturn.judges.panel.JudgePanel`). A hook that also has
    `pending_judgements(path, keys)` (returning a `judges.backlog.JudgingScan`: a panel decides by its identity)
    gets the ok records of the file it has not labelled yet judged again on a rerun; the pipeline itself never
    imports the judges (see the layering in README "Code map")."""

    async def judge(self, record: ProbeRecord) -> ProbeRecord: ...


PerturbFn = Callable[..., Perturbed | list[Message]]
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
    template_kwargs: dict[str, Any] = Field(default_factory=dict,
                                            description="the variables the renderer was loaded with (recorded)")
    record_meta: dict[str, Any] = Field(default_factory=dict, description="merged into every record's meta")
    concurrency: int = Field(default=64, ge=1)
    rpm: float | None = None
    tpm: float | None = None


@dataclass(slots=True)
class Job:
    """One sample to request. `payload` and `fields` are shared (not copied) by the samples of one (item,
    perturbation)."""

    key: str
    temperature: float
    sample: int
    seed: int
    payload: dict[str, Any]  # the request body without the per-sample temperature and seed
    estimated_tokens: int  # what the rate limiter reserves (--tpm)
    fields: dict[str, Any]  # the record fields known before the request


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
    rejudged: int = 0  # ok records of earlier runs judged again (no label yet, or a judge had failed)

    @property
    def req_per_s(self) -> float:
        return (self.ok + self.errors) / self.elapsed_s if self.elapsed_s else 0.0


@dataclass
class AssistantTurn:
    """The assistant turn an item is probed with (before perturbation; scored after it, see `ProbeRun._score`)."""

    messages: list[Message] | None
    source: Literal["dataset", "model", "none"]
    error: str | None = None
    text: str | None = None
    finish_reason: str | None = None


def clean_user_turn(text: str, stops: Sequence[str]) -> str:
    """The generated user turn without a trailing stop string some servers echo back."""
    for stop in stops:
        if stop and text.endswith(stop):
            text = text[: -len(stop)]
    return text


# Request fields the probe sets from its own settings and records: extra_body must not replace them unseen.
OWN_FIELDS = ("model", "prompt", "messages", "max_tokens", "stop", "stop_token_ids", "top_p")


def check_extra_body(settings: ProbeSettings) -> None:
    """Extra body fields win over the per-sample temperature and seed; refuse where a record would then name a
    temperature that was never sent, or k samples at T>0 would share one seed (and repeat one another), and where
    they would replace a field the probe sets and records itself."""
    body = settings.extra_body
    own = [name for name in OWN_FIELDS if name in body]
    if own:
        raise UserError(f"extra_body sets {own[0]}, which the probe sets (and records) from its own settings; "
                        "drop it from extra_body and use the matching flag or manifest key")
    if "temperature" in body:
        planned = list(settings.temperatures)
        if settings.assistant_from == "model":
            planned.append(settings.assistant_temperature)
        if any(t != body["temperature"] for t in planned):
            shown = ", ".join(f"{t:g}" for t in dict.fromkeys(planned))
            which = "temperatures of user and assistant turns" if settings.assistant_from == "model" else "temperature"
            raise UserError(f"extra_body sets temperature={body['temperature']}, which every request would send "
                            f"instead of the planned {which} ({shown}); plan that temperature or drop it from "
                            "extra_body")
    if "seed" in body and settings.samples > 1 and any(t > 0 for t in settings.temperatures):
        raise UserError(f"extra_body sets seed={body['seed']}: all {settings.samples} samples of an item would share "
                        "it and repeat one another at T>0; drop it from extra_body (each sample gets its own seed)")


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
        allow_special_tokens: bool = False,
        swap_pool: Sequence[DatasetItem] | None = None,
        resume_hint: str = "use another --out",
    ) -> None:
        """`swap_pool`: every item of the dataset (before --limit and shuffling), where `swap` partners come from;
        default `items`. `resume_hint`: the advice ending the message that refuses a mismatched results file."""
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
        self.allow_special_tokens = allow_special_tokens
        self.special_tokens: SpecialTokens | None = getattr(renderer, "special_tokens", None) \
            if settings.mode == "raw" else None
        self.counters = RunCounters()
        self.progress = Progress(
            self.counters,
            lambda: [e.stats for e in self.endpoints],
            judge_stats=lambda: judge_endpoint_stats(self.judge),
            title=progress_title or f"userturn probe {settings.model} on {settings.dataset}",
            enabled=progress,
        )
        self._path = "chat/completions" if settings.mode == "chat" else "completions"
        self._response_cap = response_cap_for({"max_tokens": settings.max_tokens, **settings.extra_body})
        self._send_temperature = "temperature" not in settings.extra_body
        self._send_seed = "seed" not in settings.extra_body
        check_extra_body(settings)
        self._stops: list[str] = []
        self._stop_ids: list[int] = []
        if renderer is not None and settings.mode == "raw":
            self._stops = list(dict.fromkeys([*renderer.stop, *settings.extra_stop]))
            self._stop_ids = list(dict.fromkeys([*renderer.stop_token_ids, *settings.extra_stop_token_ids]))
        self.resume_hint = resume_hint
        self.configs = {p: self._config(p) for p in settings.perturbations}
        self.fingerprints = {p: fingerprint(c) for p, c in self.configs.items()}
        self._unwritten: dict[str, ConfigLine] = {}  # configuration lines not yet written by this run (`_write`)
        self._pool: dict[str, DatasetItem] = {}
        self._ring: SwapRing | None = None
        if "swap" in settings.perturbations:  # only swap needs every item at once
            self._pool = {item.id: item for item in (swap_pool if swap_pool is not None else self.items)}
            for item in self.items:
                self._pool.setdefault(item.id, item)
            self._ring = SwapRing(settings.seed, self._pool)
        self._partners: dict[str, str] = {}

    # ----- configuration --------------------------------------------------------------------------------------
    def _config(self, perturbation: str) -> dict[str, Any]:
        """The readable settings that shape this run's generations under `perturbation` (client.fingerprint)."""
        s = self.settings
        by_model = s.assistant_from == "model"
        raw = s.mode == "raw" and self.renderer is not None
        chat_prompt = None
        if s.mode == "chat" and self.role_flip is not None:
            probe = [Message(role="user", content="Q"), Message(role="assistant", content="A")]
            chat_prompt = sha256_text(orjson.dumps([m.model_dump() for m in self.role_flip(probe)]).decode())
        return GenerationConfig(
            model=s.model, dataset=s.dataset, mode=s.mode, perturbation=perturbation,
            assistant_source=s.assistant_from,
            assistant_model=s.model if by_model else None,
            assistant_temperature=s.assistant_temperature if by_model else None,
            assistant_max_tokens=s.assistant_max_tokens if by_model else None,
            template_engine=getattr(self.renderer, "engine", "jinja") if raw else None,
            template_sha256=self.renderer.template_sha256 if raw and self.renderer else None,
            template_kwargs=dict(s.template_kwargs) if raw else None,
            chat_prompt_sha256=chat_prompt,
            max_tokens=s.max_tokens, stop=self._stops,
            stop_token_ids=self._stop_ids if (s.send_stop_token_ids and raw) else [],
            top_p=s.top_p, extra_body=s.extra_body, seed=s.seed,
        ).model_dump(mode="json")

    def check_resume(self, existing: ResumeIndex) -> None:
        """Refuse (ConfigMismatch, exit 2) when `existing` ok records of this model, dataset, mode and a planned
        perturbation were made with other settings, or lack a fingerprint and share a key with this run; also
        refuse a file whose keys are in the pre-schema-2 format (they could not be matched)."""
        if existing.old_schema is not None:
            check_key_format(existing.old_schema[0], self.out_path, existing.old_schema[1])
        missing = sorted(set(existing.missing_configs()) - set(self.fingerprints.values()))
        if missing:
            raise ConfigMismatch(f"{self.out_path} holds records of configuration {missing[0]} but no configuration "
                                 f"line for it, so its settings cannot be compared with this run's; "
                                 f"{self.resume_hint}")
        found = ExistingConfigs()
        found.configs = existing.ok_configs
        found.unfingerprinted = existing.unfingerprinted_keys
        planned: Collection[str] = set(self.iter_keys()) if found.unfingerprinted else ()
        found.check(self.configs.values(), planned, path=self.out_path, hint=self.resume_hint)

    # ----- planning -------------------------------------------------------------------------------------------
    def iter_keys(self) -> Iterator[str]:
        """Every planned sample's key, in run order (a generator: a run may plan millions)."""
        s = self.settings
        suffixes = [condition_suffix(t, k) for t in s.temperatures for k in range(s.samples)]
        for item_id in self._ids():
            for p in s.perturbations:
                prefix = key_prefix(s.model, s.dataset, item_id, p, s.mode)
                yield from (prefix + suffix for suffix in suffixes)

    def _ids(self) -> Sequence[str]:
        return getattr(self.items, "ids", None) or [item.id for item in self.items]

    def _check_plan(self) -> None:
        """No sample planned twice: the keys of one item are distinct, and so are the item ids."""
        s = self.settings
        ids = self._ids()
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
            return self._with_extras(payload), sha256_text(text), (len(text) // 4 + s.max_tokens) if s.tpm else 0
        assert self.renderer is not None
        prompt = self.renderer.user_turn_prompt(messages, cache=False)  # rendered once per (item, perturbation)
        payload = {"model": s.model, "prompt": prompt, "max_tokens": s.max_tokens, "stop": self._stops}
        if s.send_stop_token_ids and self._stop_ids:
            payload["stop_token_ids"] = self._stop_ids
        estimate = 0
        if s.tpm:
            counted = self.renderer.count_tokens(prompt, cache=False)
            estimate = (counted if counted is not None else len(prompt) // 4) + s.max_tokens
        return self._with_extras(payload), sha256_text(prompt), estimate

    def _with_extras(self, payload: dict[str, Any]) -> dict[str, Any]:
        """`payload` with top_p and the extra body fields (the user's extra body wins; it may set temperature or
        seed, which the samples then do not send: see `_probe`)."""
        if self.settings.top_p is not None:
            payload["top_p"] = self.settings.top_p
        payload.update(self.settings.extra_body)
        return payload

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
            partner = self._partners.get(item.id) if perturbation == "swap" else None
            if partner is not None:
                context["swap_partner"] = partner
            error = turn.error or ("no assistant turn" if turn.messages is None else None)
            if error is None and partner is not None and turns[partner].messages is None:
                error = f"swap partner {partner}: {turns[partner].error or 'no assistant turn'}"
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

    def _unfinished_items(self, done: ResumeIndex, conditions: list[tuple[float, int]]
                          ) -> Iterator[tuple[DatasetItem, list[tuple[str, list[str], list[int]]]]]:
        """(item, [(perturbation, its keys, positions of the keys not yet ok)]) in run order, less the items whose
        every planned key is already ok (counted as skipped here), which are never read: a resume over a dataset
        kept on disk parses only the items it still has to probe. Keys share one escaped prefix per item and
        perturbation; the `t=T|s=K` suffixes are built once."""
        s = self.settings
        suffixes = [condition_suffix(t, k) for t, k in conditions]
        planned = len(s.perturbations) * len(suffixes)

        prefixes = [(p, key_prefixes(s.model, s.dataset, p, s.mode)) for p in s.perturbations]

        def unfinished() -> Iterator[tuple[int, list[tuple[str, list[str], list[int]]]]]:
            ids = self._ids()
            for index in range(len(ids)):
                item_id = ids[index]
                plans = []
                for perturbation, prefix in prefixes:
                    start = prefix(item_id)
                    keys = [start + suffix for suffix in suffixes]
                    plans.append((perturbation, keys, done.pending(keys)))
                if any(pending for _, _, pending in plans):
                    yield index, plans
                else:
                    self.counters.skipped += planned
                    self.counters.total -= planned

        read = getattr(self.items, "read_tagged", None)
        return read(unfinished()) if read is not None else ((self.items[i], plans) for i, plans in unfinished())

    # ----- records --------------------------------------------------------------------------------------------
    def _seed(self, item_id: str, temperature: float, sample: int, perturbation: str) -> int:
        """The seed a sample's request carries: its own, unless extra_body sets one (then that one is recorded)."""
        fixed = self.settings.extra_body.get("seed")
        if type(fixed) is int:
            return fixed
        s = self.settings
        return sample_seed(s.seed, item_id, temperature, sample, perturbation, s.mode)

    def _shared_fields(self, item: DatasetItem, perturbation: str, messages: list[Message],
                       context: dict[str, Any]) -> dict[str, Any]:
        """Record fields shared by every sample of one (item, perturbation)."""
        return {**self._run_fields(perturbation), **self._item_fields(item, messages, context)}

    def _run_fields(self, perturbation: str) -> dict[str, Any]:
        """Record fields shared by every sample of one perturbation."""
        s = self.settings
        return {"model": s.model, "dataset": s.dataset, "mode": s.mode, "perturbation": perturbation,
                "template_sha256": self.renderer.template_sha256 if (self.renderer and s.mode == "raw") else None,
                "config_fingerprint": self.fingerprints[perturbation]}

    def _item_fields(self, item: DatasetItem, messages: list[Message], context: dict[str, Any]) -> dict[str, Any]:
        """Record fields of one item (less `prompt_sha256`)."""
        s = self.settings
        meta = dict(item.meta or {})
        if context.get("assistant_source") == "model" and context.get("assistant_text") is not None:
            meta["assistant_turn"] = context["assistant_text"]
            if context.get("assistant_finish_reason") is not None:
                meta["assistant_finish_reason"] = context["assistant_finish_reason"]
        if context.get("swap_partner") is not None:
            meta["swap_partner"] = context["swap_partner"]
        meta.update(s.record_meta)
        return {
            "item_id": item.id, "messages": messages, "assistant_source": context.get("assistant_source", "dataset"),
            "reference_answer": item.answer, "correct": context.get("correct"),
            "task_scores": context.get("task_scores"), "perturbation_detail": context.get("perturbation_detail"),
            "meta": meta or None,
            "special_tokens_in_content": None if self.special_tokens is None
            else self.special_tokens.first_in(messages) is not None,
        }

    def _error_record(self, key: str, item: DatasetItem, perturbation: str, temperature: float, sample: int,
                      messages: list[Message], error: str, context: dict[str, Any]) -> ProbeRecord:
        return ProbeRecord(
            **self._shared_fields(item, perturbation, messages, context), key=key, temperature=temperature,
            sample=sample, seed=self._seed(item.id, temperature, sample, perturbation),
            status="error", error=error, attempts=0,
        )

    # ----- the assistant turn ---------------------------------------------------------------------------------
    async def _assistant_turns(self) -> dict[str, AssistantTurn]:
        """The model's assistant turn of every item of the run, and the turn of every `swap` partner (which may lie
        outside it). Dataset turns of the run's own items are taken when the item is probed (`_turn`), so a run
        over a dataset kept on disk holds no per-item state."""
        s = self.settings
        turns: dict[str, AssistantTurn] = {}
        needed: list[DatasetItem] = []
        if self._ring is not None:
            self._partners = {item.id: p for item in self.items if (p := self._partner(item)) is not None}
        wanted = {item.id: item for item in self.items} if s.assistant_from == "model" else {}
        for partner in self._partners.values():
            wanted.setdefault(partner, self._pool[partner])
        reuse = self._reusable_answers() if s.assistant_from == "model" else {}
        for item in wanted.values():
            if s.assistant_from == "dataset":
                turns[item.id] = self._dataset_turn(item)
            elif item.id in reuse:
                text, finish = reuse[item.id]
                turns[item.id] = self._with_answer(item, text, finish_reason=finish)
            else:
                needed.append(item)
        if needed:
            results = await self._fan_out(needed, self._answer)
            for item, turn in zip(needed, results, strict=True):
                turns[item.id] = turn
        return turns

    def _turn(self, item: DatasetItem, turns: dict[str, AssistantTurn]) -> AssistantTurn:
        """The assistant turn `item` is probed with: generated (or looked up) earlier, or its dataset's own."""
        return turns.get(item.id) or self._dataset_turn(item)

    @staticmethod
    def _dataset_turn(item: DatasetItem) -> AssistantTurn:
        if item.ends_with_assistant:
            return AssistantTurn(list(item.messages), "dataset", text=item.messages[-1].content)
        return AssistantTurn(None, "dataset", error="conversation does not end with an assistant turn (use "
                                                    "--assistant-from model)")

    def _existing_records(self, configs: dict[str, dict[str, Any]]) -> Iterator[ProbeRecord]:
        """The records already in the results file, one at a time; `configs` collects the file's configurations
        as they pass (lines that are neither are skipped: the resume scan has already refused a malformed file)."""
        path = Path(self.out_path)
        if not path.exists():
            return
        for _, raw, _complete in iter_lines(path):
            try:
                obj = orjson.loads(raw)
                line = config_line(obj)
                config = line or legacy_config(obj)
                if config is not None:
                    configs.setdefault(config.fingerprint, config.config)
                if line is None:
                    yield ProbeRecord.model_validate(obj)
            except (orjson.JSONDecodeError, ValidationError):
                continue

    def _reusable_answers(self) -> dict[str, tuple[str, str | None]]:
        """{item id: (assistant turn, its finish reason)} written by this model with these assistant settings in
        earlier runs (its own records' `meta.assistant_turn`, and swap records' partner turns), so a resumed run
        probes the same turns."""
        s = self.settings
        mine = self.configs[s.perturbations[0]]
        reuse: dict[str, tuple[str, str | None]] = {}
        configs: dict[str, dict[str, Any]] = {}
        for record in self._existing_records(configs):
            if record.assistant_source != "model":
                continue
            config = configs.get(record.config_fingerprint or "")
            if config is not None:
                if any(config.get(k) != mine.get(k) for k in ASSISTANT_SETTINGS):
                    continue  # another model, dataset, seed or assistant setting wrote this turn
            elif record.model != s.model or record.dataset != s.dataset:
                continue
            meta = record.meta or {}
            text = meta.get("assistant_turn")
            if isinstance(text, str):
                finish = meta.get("assistant_finish_reason")
                reuse.setdefault(record.item_id, (text, finish if isinstance(finish, str) else None))
            partner = meta.get("swap_partner")
            if (record.perturbation == "swap" and isinstance(partner, str) and record.messages
                    and record.messages[-1].role == "assistant"):
                reuse.setdefault(partner, (record.messages[-1].content, None))
        return reuse

    def _partner(self, item: DatasetItem) -> str | None:
        """The item whose assistant turn `swap` puts in: the first after this one on the seeded ring
        (client.probe.perturb.SwapRing) that is not a sample of the same query, is of the item's `meta.category` when it
        has one, and, for dataset turns, ends with an assistant turn other than this one's. None when no item
        qualifies (or `swap` is not planned)."""
        if self._ring is None:
            return None
        query = (item.meta or {}).get("query_id", item.id)
        category = (item.meta or {}).get("category")
        own = item.messages[-1].content if item.ends_with_assistant else None
        for other_id in self._ring.after(item.id):
            other = self._pool[other_id]
            if (other.meta or {}).get("query_id", other.id) == query or (
                    category is not None and (other.meta or {}).get("category") != category):
                continue
            if self.settings.assistant_from == "model":
                return other_id
            if other.ends_with_assistant and other.messages[-1].content != own:
                return other_id
        return None

    def _score(self, item: DatasetItem, messages: list[Message]) -> tuple[bool | None, dict[str, float] | None]:
        """Task accuracy of the assistant turn actually probed (after perturbation): (None, None) without a scorer,
        and without an assistant turn (`remove`)."""
        if self.scorer is None or not messages or messages[-1].role != "assistant":
            return None, None
        return self.scorer(self.settings.dataset, item, strip_reasoning(messages[-1].content))

    def _history(self, item: DatasetItem) -> list[Message]:
        """The conversation the model answers: everything up to (not including) a final assistant turn."""
        return list(item.messages[:-1]) if item.ends_with_assistant else list(item.messages)

    def _with_answer(self, item: DatasetItem, text: str, reasoning: str | None = None,
                     finish_reason: str | None = None) -> AssistantTurn:
        extra = {"reasoning_content": reasoning} if reasoning else {}
        messages = [*self._history(item), Message(role="assistant", content=text, **extra)]
        return AssistantTurn(messages, "model", text=text, finish_reason=finish_reason)

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
            choice = result.data["choices"][0]
            message = choice["message"]
            content = message.get("content") or ""
        except RequestFailed as exc:
            if exc.endpoint_down:
                raise EndpointError(exc.endpoint_down) from None
            return AssistantTurn(None, "model", error=f"assistant turn failed: {exc.reason}")
        except (KeyError, IndexError, TypeError):
            return AssistantTurn(None, "model", error="assistant turn failed: malformed chat completion")
        reasoning = message.get("reasoning_content")
        if "<think>" in content or "</think>" in content:
            match = re.search(r"<think>(.*?)</think>", content, re.DOTALL)
            reasoning = reasoning or (match.group(1).strip() if match else None)
            content = strip_reasoning(content)
            if content.startswith("<think>") and "</think>" not in content:  # reasoning cut before any answer
                reasoning, content = reasoning or content.removeprefix("<think>").strip(), ""
        finish = choice.get("finish_reason")
        finish = finish if isinstance(finish, str) else None
        if not content.strip():
            # Nothing to probe or score (e.g. reasoning used up --assistant-max-tokens): an error, not a wrong answer.
            return AssistantTurn(None, "model", error=f"assistant turn failed: empty answer (finish_reason {finish}"
                                 f"{'; raise --assistant-max-tokens' if finish == 'length' else ''})")
        return self._with_answer(item, content, reasoning, finish)

    # ----- the probe ------------------------------------------------------------------------------------------
    async def _probe(self, job: Job) -> ProbeRecord:
        """One sample's record."""
        s = self.settings
        body = dict(job.payload)
        if self._send_temperature:
            body["temperature"] = job.temperature
        if self._send_seed:
            body["seed"] = job.seed
        if self.limiter.active:
            await self.limiter.acquire(job.estimated_tokens)
        endpoint = next(self._next_endpoint)
        try:
            result = await endpoint.post_json(self._path, body, response_cap=self._response_cap)
        except RequestFailed as exc:
            if exc.endpoint_down:  # stop the run: no error records for a dead server (client.http.endpoint)
                raise EndpointError(exc.endpoint_down) from None
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
        fields = self._fields(job)
        try:
            return ProbeRecord(**fields, user_turn=user_turn, finish_reason=choice.get("finish_reason"),
                               matched_stop=choice.get("matched_stop"), status="ok", usage=usage, latency_s=latency,
                               attempts=result.attempts)
        except ValidationError as exc:
            return ProbeRecord(**fields, status="error", attempts=result.attempts, latency_s=latency,
                               error=f"malformed completion body ({first_error(exc)})")

    @staticmethod
    def _fields(job: Job) -> dict[str, Any]:
        """The record fields known before the request."""
        return {**job.fields, "key": job.key, "temperature": job.temperature, "sample": job.sample, "seed": job.seed}

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
        check_items(self.items, self.special_tokens, allow=self.allow_special_tokens,
                    tokenizer=getattr(self.renderer, "name", self.settings.model))
        self._check_plan()
        with results_lock(self.out_path):  # exit 2 if another process writes this file; held through the run
            return await self._run_locked()

    async def _run_locked(self) -> ProbeSummary:
        existing = scan_results(self.out_path)  # streaming: key states and configurations, no records kept
        self.check_resume(existing)  # before the writer opens the file: a refused file is left untouched
        backlog = None
        pending = getattr(self.judge, "pending_judgements", None)  # a panel finds what it still has to label
        if pending is not None:
            done = {k for k in self.iter_keys() if existing.is_ok(k)}
            backlog = pending(self.out_path, done)  # refuses a file labelled by another panel
            del done
        s = self.settings
        planned = len(self._ids()) * len(s.perturbations) * len(s.temperatures) * s.samples
        c = self.counters
        c.total = planned  # `_jobs` moves keys already ok from here to `skipped` as it reaches them
        c.skipped = 0
        run = run_info(scrub=redact)
        info = getattr(self.renderer, "info", None) if self.settings.mode == "raw" else None
        self._unwritten = {fp: ConfigLine(fingerprint=fp, config=self.configs[p], renderer=info, run=run)
                           for p, fp in self.fingerprints.items()}
        writer = JsonlWriter(self.out_path, per_tick=True)
        started = time.monotonic()
        self.progress.start()
        try:
            if backlog is not None and backlog.todo:
                records = backlog.records()
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
            self._count_judged(record)
            self._write(writer, record)

    async def _worker(self, jobs: Iterator[Job | ProbeRecord], writer: JsonlWriter) -> None:
        c = self.counters
        for job in jobs:  # the workers share the generator: each takes the next job when it is free
            record = job if isinstance(job, ProbeRecord) else await self._probe(job)
            if self.judge is not None and record.status == "ok":
                try:
                    judged = await self.judge.judge(record)
                except EndpointError:
                    self._write(writer, record)  # keep the generation; `userturn judge` can label it later
                    raise
                record = judged
                self._count_judged(record)
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
