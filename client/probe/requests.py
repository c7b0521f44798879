"""What a run sends and records: the configuration (and fingerprint) of each planned perturbation, the body one
(item, perturbation) shares across its samples, the per-sample temperature and seed, the record fields, and one
sample's request turned into its record (`RequestBuilder.probe`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson
from pydantic import ValidationError

from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointError, RequestFailed
from userturn.client.http.ratelimit import RateLimiter
from userturn.client.http.replies import matched_stop, response_cap_for, usage_of
from userturn.client.probe.perturbations.base import PARTNER_META
from userturn.client.probe.seeds import sample_seed
from userturn.client.probe.settings import Job, ProbeSettings, Renderer, RoleFlipFn, check_extra_body, clean_user_turn
from userturn.client.render.special_tokens import SpecialTokens
from userturn.client.render.stops import fit_stops
from userturn.core.errors import first_error
from userturn.core.fingerprint import GenerationContext, fingerprint, generation_config
from userturn.core.records import Message, ProbeRecord, sha256_text
from userturn.core.text import content_text, strip_reasoning

log = logging.getLogger("userturn")


class RequestBuilder:
    """Builds request bodies and records, and sends one sample (`probe`) to the next of `endpoints` (a cycle the
    run shares with its assistant turns). Raw mode needs `renderer`, chat mode `role_flip`."""

    def __init__(self, settings: ProbeSettings, *, renderer: Renderer | None, role_flip: RoleFlipFn | None,
                 endpoints: Iterator[Endpoint]) -> None:
        if settings.mode == "raw" and renderer is None:
            raise ValueError("raw mode needs a chat-template renderer")
        if settings.mode == "chat" and role_flip is None:
            raise ValueError("chat mode needs a role-flip function")
        self.settings = settings
        self.renderer = renderer if settings.mode == "raw" else None
        self.role_flip = role_flip
        self._next_endpoint = endpoints
        self.limiter = RateLimiter(settings.rpm, settings.tpm)
        self._usage_noted = False  # a malformed usage was reported once (`probe`)
        self.special_tokens: SpecialTokens | None = self.renderer.special_tokens if self.renderer is not None else None
        self._path = "chat/completions" if settings.mode == "chat" else "completions"
        self._response_cap = response_cap_for({"max_tokens": settings.max_tokens, **settings.extra_body})
        self._send_temperature = "temperature" not in settings.extra_body
        self._send_seed = "seed" not in settings.extra_body
        check_extra_body(settings)
        self._sampler = settings.sampler()
        self.stops: list[str] = []  # every stop string (an echoed one is cut from the user turn)
        stop_ids: list[int] = []
        if self.renderer is not None:
            self.stops = list(dict.fromkeys([*self.renderer.stop, *settings.extra_stop]))
            stop_ids = list(dict.fromkeys([*self.renderer.stop_token_ids, *settings.extra_stop_token_ids]))
        traits = settings.engine_traits
        # What each request sends (and the configuration records): the strings the engine takes, ids for the rest.
        self._sent_stops, self._sent_stop_ids = fit_stops(
            self.stops, stop_ids, self.renderer.token_ids if self.renderer is not None else {}, traits.max_stop_strings,
            send_ids=settings.send_stop_token_ids, engine=traits.engine, external=traits.external,
            ids_carry=traits.honours_stop_token_ids or (traits.external and settings.send_stop_token_ids))
        self.configs = {p: self._config(p) for p in settings.perturbations}
        self.fingerprints = {p: fingerprint(c) for p, c in self.configs.items()}

    def _config(self, perturbation: str) -> dict[str, Any]:
        """The readable settings that shape this run's generations under `perturbation` (core.fingerprint)."""
        s = self.settings
        by_model = s.assistant_from == "model"
        renderer = self.renderer
        raw = renderer is not None
        chat_prompt = None
        if s.mode == "chat" and self.role_flip is not None:
            probe = [Message(role="user", content="Q"), Message(role="assistant", content="A")]
            chat_prompt = sha256_text(orjson.dumps([m.model_dump() for m in self.role_flip(probe)]).decode())
        return generation_config(GenerationContext(
            model=s.model, dataset=s.dataset, mode=s.mode, perturbation=perturbation,
            assistant_source=s.assistant_from, assistant_model=s.model if by_model else None,
            template_engine=renderer.engine if renderer is not None else None,
            template_sha256=renderer.template_sha256 if renderer is not None else None,
            template_kwargs=dict(s.template_kwargs) if raw else None, chat_prompt_sha256=chat_prompt,
            stop=self._sent_stops, stop_token_ids=self._sent_stop_ids if raw else [], extra_body=s.extra_body,
            engine=s.engine_traits.engine, seed_honoured=s.engine_traits.seed_honoured,
            server_sampler_defaults=s.engine_traits.server_sampler_defaults,
            batch_invariant=s.engine_traits.batch_invariant,
        ), s, self._sampler)

    def payload_base(self, messages: list[Message]) -> tuple[dict[str, Any], str, int]:
        """The request body the samples of one (item, perturbation) share, with the sampling options that are set,
        the sampler (`ProbeSettings.sampler`) and the extra body (which wins; a temperature or seed in it is sent
        instead of the samples' own), the sha256 of its prompt, and the tokens it is estimated to cost (0 without
        --tpm)."""
        s = self.settings
        if s.mode == "chat":
            assert self.role_flip is not None
            dumped = [m.model_dump(exclude_none=True) for m in self.role_flip(messages)]
            payload: dict[str, Any] = {"model": s.model, "messages": dumped, "max_tokens": s.max_tokens}
            text = orjson.dumps(dumped).decode()
            counted = None
        else:
            assert self.renderer is not None
            text = self.renderer.user_turn_prompt(messages, cache=False)  # once per (item, perturbation)
            payload = {"model": s.model, "prompt": text, "max_tokens": s.max_tokens, "stop": self._sent_stops}
            if self._sent_stop_ids:
                payload["stop_token_ids"] = self._sent_stop_ids
            counted = self.renderer.count_tokens(text, cache=False) if s.tpm else None
        payload.update(s.request_fields())
        payload.update(self._sampler)
        payload.update(s.extra_body)
        estimate = (counted if counted is not None else len(text) // 4) + s.max_tokens if s.tpm else 0
        return payload, sha256_text(text), estimate

    # ----- records --------------------------------------------------------------------------------------------
    def seed(self, item_id: str, temperature: float, sample: int, perturbation: str) -> int:
        """The seed a sample's request carries: its own, unless extra_body sets one (then that one is recorded)."""
        s = self.settings
        fixed = s.extra_body.get("seed")
        return fixed if type(fixed) is int else sample_seed(s.seed, item_id, temperature, sample, perturbation, s.mode)

    def shared_fields(self, item: DatasetItem, perturbation: str, messages: list[Message],
                       context: dict[str, Any]) -> dict[str, Any]:
        """Record fields shared by every sample of one (item, perturbation), less `prompt_sha256`."""
        s = self.settings
        meta = dict(item.meta or {})
        if context.get("assistant_source") == "model" and context.get("assistant_text") is not None:
            meta["assistant_turn"] = context["assistant_text"]
            if context.get("assistant_finish_reason") is not None:
                meta["assistant_finish_reason"] = context["assistant_finish_reason"]
        if context.get(PARTNER_META) is not None:
            meta[PARTNER_META] = context[PARTNER_META]
        meta.update(s.record_meta)
        return {
            "model": s.model, "dataset": s.dataset, "mode": s.mode, "perturbation": perturbation,
            "template_sha256": self.renderer.template_sha256 if self.renderer is not None else None,
            "config_fingerprint": self.fingerprints[perturbation],
            "item_id": item.id, "messages": messages, "assistant_source": context.get("assistant_source", "dataset"),
            "reference_answer": item.answer, "correct": context.get("correct"),
            "task_scores": context.get("task_scores"), "perturbation_detail": context.get("perturbation_detail"),
            "meta": meta or None,
            "special_tokens_in_content": None if self.special_tokens is None
            else self.special_tokens.first_in(messages) is not None,
        }

    def error_record(self, key: str, item: DatasetItem, perturbation: str, temperature: float, sample: int,
                      messages: list[Message], error: str, context: dict[str, Any]) -> ProbeRecord:
        return ProbeRecord(
            **self.shared_fields(item, perturbation, messages, context), key=key, temperature=temperature,
            sample=sample, seed=self.seed(item.id, temperature, sample, perturbation),
            status="error", error=error, attempts=0,
        )

    # ----- the probe ------------------------------------------------------------------------------------------
    async def probe(self, job: Job, tried: int = 0) -> ProbeRecord:
        """One sample's record. A first attempt (`tried` 0) that times out raises RetryLater: the caller sends it
        again, after the samples not yet tried, with `tried=1`."""
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
            result = await endpoint.post_json(self._path, body, response_cap=self._response_cap, defer=not tried,
                                              tried=tried)
        except RequestFailed as exc:
            if exc.endpoint_down:  # stop the run: no error records for a dead server (client.http.endpoint)
                raise EndpointError(exc.endpoint_down) from None
            return ProbeRecord(**self._fields(job), status="error", error=exc.reason, attempts=exc.attempts)
        try:
            choice = result.data["choices"][0]
            if s.mode == "chat":  # content parts joined; TypeError for content that is not text
                text = strip_reasoning(content_text(choice["message"].get("content")))
            else:
                text = choice["text"]
            if not isinstance(text, str):
                raise TypeError("text is not a string")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            return ProbeRecord(**self._fields(job), status="error", error=f"malformed completion body ({exc})",
                               attempts=result.attempts, latency_s=result.latency_s)
        usage, dropped = usage_of(result.data.get("usage"))
        if dropped is not None and not self._usage_noted:  # the completion is good: keep it, without the count
            self._usage_noted = True
            log.warning("userturn: warning: %s answered a malformed usage (%s): it is left out of the records, the "
                        "completions are kept", endpoint.base_url, dropped)
        if usage is not None:
            stats = endpoint.stats
            stats.prompt_tokens += usage.prompt_tokens or 0
            stats.completion_tokens += usage.completion_tokens or 0
            if self.limiter.tokens is not None:
                self.limiter.settle(job.estimated_tokens, usage.total_tokens)
        user_turn = clean_user_turn(text, self.stops)
        latency = round(result.latency_s, 6)
        fields = self._fields(job)
        try:
            return ProbeRecord(**fields, user_turn=user_turn, finish_reason=choice.get("finish_reason"),
                               matched_stop=matched_stop(choice, s.engine_traits), status="ok", usage=usage,
                               latency_s=latency, attempts=result.attempts)
        except ValidationError as exc:
            return ProbeRecord(**fields, status="error", attempts=result.attempts, latency_s=latency,
                               error=f"malformed completion body ({first_error(exc)})")

    @staticmethod
    def _fields(job: Job) -> dict[str, Any]:
        """The record fields known before the request."""
        return {**job.fields, "key": job.key, "temperature": job.temperature, "sample": job.sample, "seed": job.seed}
