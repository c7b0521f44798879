"""The state of one probe run, set up once: settings, endpoints, renderer, stops, rate limiter, counters, the
configuration (and fingerprint) of each planned perturbation, and the partner ring. The first of `ProbeRun`'s layers:
`RunState`, `RequestBuilder` (requests.py), `Planner` (planning.py), `AssistantTurns`, `ProbeRun` (pipeline.py)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import orjson
from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint
from userturn.client.http.ratelimit import RateLimiter
from userturn.client.http.replies import response_cap_for
from userturn.client.probe.perturb import PartnerRing, needs_partner
from userturn.client.probe.progress import Progress, RunCounters, judge_endpoint_stats
from userturn.client.probe.settings import (
    JudgeHook,
    PerturbFn,
    ProbeSettings,
    Renderer,
    RoleFlipFn,
    ScoreFn,
    check_extra_body,
    no_perturbation,
)
from userturn.client.render.special_tokens import SpecialTokens
from userturn.client.render.stops import fit_stops

from userturn.core.fingerprint import GenerationContext, fingerprint, generation_config
from userturn.core.records import ConfigLine, Message, sha256_text


class RunState:
    """The settings and the parts of one probe run; `ProbeRun` adds the work."""

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
        partner_pool: Sequence[DatasetItem] | None = None,
        resume_hint: str = "use another --out",
        notices: Sequence[str] = (),
    ) -> None:
        """`partner_pool`: every item of the dataset (before --limit and shuffling), where partners come from;
        default `items`. `resume_hint`: the advice ending the message that refuses a mismatched results file.
        `notices`: lines printed (stderr) once the run has passed its checks and starts generating."""
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
        self.perturb = perturb or no_perturbation
        self.scorer = scorer
        self.role_flip = role_flip
        self.limiter = RateLimiter(settings.rpm, settings.tpm)
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
        self._sampler = settings.sampler()
        self._stops: list[str] = []  # every stop string (an echoed one is cut from the user turn)
        self._stop_ids: list[int] = []
        if renderer is not None and settings.mode == "raw":
            self._stops = list(dict.fromkeys([*renderer.stop, *settings.extra_stop]))
            self._stop_ids = list(dict.fromkeys([*renderer.stop_token_ids, *settings.extra_stop_token_ids]))
        traits = settings.engine_traits
        # What each request sends (and the configuration records): the strings the engine takes, ids for the rest.
        self._sent_stops, self._sent_stop_ids = fit_stops(
            self._stops, self._stop_ids, getattr(renderer, "token_ids", {}), traits.max_stop_strings,
            send_ids=settings.send_stop_token_ids, engine=traits.engine,
            ids_carry=traits.honours_stop_token_ids or (traits.engine == "external" and settings.send_stop_token_ids))
        self.resume_hint = resume_hint
        self.notices = list(notices)
        self.configs = {p: self._config(p) for p in settings.perturbations}
        self.fingerprints = {p: fingerprint(c) for p, c in self.configs.items()}
        self._unwritten: dict[str, ConfigLine] = {}  # configuration lines not yet written by this run (`_write`)
        self._pool: dict[str, DatasetItem] = {}
        self._ring: PartnerRing | None = None
        if needs_partner(settings.perturbations):  # only a partner-needing perturbation needs every item
            self._pool = {item.id: item for item in (partner_pool if partner_pool is not None else self.items)}
            for item in self.items:
                self._pool.setdefault(item.id, item)
            self._ring = PartnerRing(settings.seed, self._pool)
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
        return generation_config(GenerationContext(
            model=s.model, dataset=s.dataset, mode=s.mode, perturbation=perturbation,
            assistant_source=s.assistant_from, assistant_model=s.model if by_model else None,
            template_engine=getattr(self.renderer, "engine", "jinja") if raw else None,
            template_sha256=self.renderer.template_sha256 if raw and self.renderer else None,
            template_kwargs=dict(s.template_kwargs) if raw else None, chat_prompt_sha256=chat_prompt,
            stop=self._sent_stops, stop_token_ids=self._sent_stop_ids if raw else [], extra_body=s.extra_body,
            engine=s.engine_traits.engine, seed_honoured=s.engine_traits.seed_honoured,
            server_sampler_defaults=s.engine_traits.server_sampler_defaults,
        ), s, self._sampler)
