"""Request bodies and records: the body one (item, perturbation) shares across its samples, the per-sample
temperature and seed, the record fields, and one sample's request turned into its record."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError
from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import EndpointError, RequestFailed
from userturn.client.http.replies import matched_stop
from userturn.client.probe.perturbations.base import PARTNER_META
from userturn.client.probe.seeds import sample_seed
from userturn.client.probe.settings import Job, clean_user_turn
from userturn.client.probe.state import RunState

from userturn.core.errors import first_error
from userturn.core.records import Message, ProbeRecord, sha256_text
from userturn.core.text import content_text, strip_reasoning


class RequestBuilder(RunState):
    """Builds request bodies and records; sends one sample (`_probe`)."""

    def _payload_base(self, messages: list[Message]) -> tuple[dict[str, Any], str, int]:
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
    def _seed(self, item_id: str, temperature: float, sample: int, perturbation: str) -> int:
        """The seed a sample's request carries: its own, unless extra_body sets one (then that one is recorded)."""
        s = self.settings
        fixed = s.extra_body.get("seed")
        return fixed if type(fixed) is int else sample_seed(s.seed, item_id, temperature, sample, perturbation, s.mode)

    def _shared_fields(self, item: DatasetItem, perturbation: str, messages: list[Message],
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
            "template_sha256": self.renderer.template_sha256 if (self.renderer and s.mode == "raw") else None,
            "config_fingerprint": self.fingerprints[perturbation],
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
            if s.mode == "chat":  # content parts joined; TypeError for content that is not text
                text = strip_reasoning(content_text(choice["message"].get("content")))
            else:
                text = choice["text"]
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
                               matched_stop=matched_stop(choice, s.engine_traits), status="ok", usage=usage,
                               latency_s=latency, attempts=result.attempts)
        except ValidationError as exc:
            return ProbeRecord(**fields, status="error", attempts=result.attempts, latency_s=latency,
                               error=f"malformed completion body ({first_error(exc)})")

    @staticmethod
    def _fields(job: Job) -> dict[str, Any]:
        """The record fields known before the request."""
        return {**job.fields, "key": job.key, "temperature": job.temperature, "sample": job.sample, "seed": job.seed}
