"""One typed path to a probe run, shared by `probe`, `probe --manifest` and `run`: every source of settings is an
`Options` layer (flags > experiment model entry > experiment > manifest > default); `open_target` launches the
manifest's server if any and resolves the layers into a `ProbeTarget` and `ProbeOptions`; a `TargetSession` holds a
target's endpoints and renderer and builds each `ProbeRun`. Warnings go to the `userturn` logger.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from userturn.core import defaults
from userturn.core.engine_traits import EXTERNAL, OLLAMA, EngineTraits
from userturn.core.errors import UserError
from userturn.core.options import Options, ProbeOptions, RendererName
from userturn.core.options import resolve as resolve_options

if TYPE_CHECKING:
    from userturn.client.data.dataset import DatasetItem
    from userturn.client.http.endpoint import Endpoint
    from userturn.client.probe.pipeline import ProbeRun
    from userturn.client.probe.settings import JudgeHook, ProbeSettings
    from userturn.client.render.templates import PromptRenderer
    from userturn.serve.manifest import Manifest

Launcher = Literal["local", "slurm"]
Mode = Literal["raw", "chat"]
log = logging.getLogger("userturn")


@dataclass(frozen=True, kw_only=True)
class ProbeTarget:
    """Where requests go and how their prompts are rendered (stops and `extra_body` from the manifest)."""

    base_urls: list[str]
    model: str
    api_key_env: str = defaults.API_KEY_ENV
    api_key_file: str | None = None  # wins over api_key_env
    tokenizer: str | None = None
    chat_template: str | None = None
    renderer: RendererName = "auto"
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    extra_body: dict[str, Any] = field(default_factory=dict)
    engine_traits: EngineTraits = EXTERNAL  # a launched engine's own (its definition fills them)


class TargetSource(NamedTuple):
    """A manifest (launched for the run), or base URLs and a model name (given with a manifest, they win)."""

    manifest: str | None = None
    base_urls: Sequence[str] | None = None
    model: str | None = None
    api_key_env: str | None = None
    launcher: Launcher | None = None
    api_key_file: str | None = None


def _resolved(layers: Sequence[Options]) -> tuple[dict[str, Any], ProbeOptions]:
    """(the rendering options set, all options) from `layers`, highest precedence first."""
    options = resolve_options(layers)
    fields = ("tokenizer", "chat_template", "renderer")
    return {name: getattr(options, name) for name in fields if name in options.model_fields_set}, options


def greedy_samples_warning(options: ProbeOptions) -> str | None:
    """The warning for k > 1 samples at temperature 0 (k identical greedy generations per item), else None."""
    if options.samples < 2 or not any(t == 0 for t in options.temperatures):
        return None
    k = options.samples
    return (f"userturn: warning: {k} samples per item at temperature 0 repeat one greedy generation {k} times "
            f"({k}x the compute, no new information); sample at a temperature > 0, or ask 1 sample at T=0")


def warn_greedy_samples(options: ProbeOptions) -> None:
    """Log `greedy_samples_warning` when it applies."""
    warning = greedy_samples_warning(options)
    if warning is not None:
        log.warning(warning)


def manifest_layer(manifest: Manifest) -> Options:
    """A manifest's `probe:` section as a layer, its paths resolved (a GGUF model is its own tokenizer)."""
    from userturn.core.packaged import is_gguf

    probe = manifest.probe
    tokenizer = manifest.resolve_path(probe.tokenizer) or (manifest.resolve_path(manifest.model)
                                                         if is_gguf(manifest.model) else None)
    return probe.layer().model_copy(update={"tokenizer": tokenizer,
                                            "chat_template": manifest.resolve_path(probe.chat_template)})


def _manifest(source: TargetSource, manifest: Manifest | None) -> Manifest:
    """The source's manifest: `manifest` when the caller read it already, else read now."""
    if manifest is not None:
        return manifest
    from userturn.serve.manifest import load_manifest

    return load_manifest(str(source.manifest))


def preview(source: TargetSource, layers: Sequence[Options], manifest: Manifest | None = None,
            ) -> tuple[dict[str, Any], ProbeOptions]:
    """What `open_target` would resolve (target fields, options), with the manifest read (`manifest`: read
    already) but nothing launched."""
    if source.manifest is None:
        return _resolved(layers)
    return _resolved([*layers, manifest_layer(_manifest(source, manifest))])


@contextlib.contextmanager
def open_target(source: TargetSource, layers: Sequence[Options], manifest: Manifest | None = None,
                ) -> Iterator[tuple[ProbeTarget, ProbeOptions]]:
    """Resolve the target and options; with a manifest (`manifest`: read already), its server runs (and is
    stopped) around the block."""
    if source.manifest is None:
        if not source.base_urls:
            raise UserError("--base-url or --manifest is required")
        if not source.model:
            raise UserError("--model is required with --base-url")
        fields, options = _resolved(layers)
        warn_greedy_samples(options)
        yield ProbeTarget(base_urls=list(source.base_urls), model=source.model,
                          api_key_env=source.api_key_env or defaults.API_KEY_ENV, api_key_file=source.api_key_file,
                          **fields), options
        return
    from userturn.serve.launcher import launch

    manifest = _manifest(source, manifest)
    fields, options = _resolved([*layers, manifest_layer(manifest)])
    warn_greedy_samples(options)
    # the server is sized for the requests this run keeps in flight (llama-server: one slot each)
    manifest = manifest.model_copy(update={"probe": manifest.probe.model_copy(
        update={"concurrency": options.concurrency})})
    with launch(manifest, launcher=source.launcher or "local") as server:
        probe = manifest.probe
        yield ProbeTarget(
            base_urls=list(source.base_urls or server.base_urls), model=source.model or server.model_name,
            api_key_env=server.api_key_env or source.api_key_env or defaults.API_KEY_ENV,
            api_key_file=None if server.api_key_env else source.api_key_file,  # a launched server's own key wins
            stop=list(probe.stop), stop_token_ids=list(probe.stop_token_ids), extra_body=dict(probe.extra_body),
            engine_traits=server.traits if not source.base_urls else EXTERNAL, **fields), options


def recognisable_engines() -> list[EngineTraits]:
    """The traits of every engine a bare URL's server can be recognised as (`identity_route`), in the registry's
    order, then Ollama (never launched, so not in the registry)."""
    from userturn.serve.engines import ENGINES

    return [*(e.traits for e in ENGINES.values() if e.traits.identity_route), OLLAMA]


def load_renderer(target: ProbeTarget, options: ProbeOptions) -> PromptRenderer:
    """The prompt renderer of `target` (raw mode): its tokenizer's chat template, or harmony for gpt-oss."""
    from userturn.client.render.templates import PromptRenderer

    if not target.tokenizer:
        raise UserError("--tokenizer is required in raw mode (the model's chat template renders the prompt)")
    harmony = {"auto": None, "chat_template": False, "harmony": True}[target.renderer]
    return PromptRenderer.load(target.tokenizer, chat_template=target.chat_template,
                               enable_thinking=options.enable_thinking,
                               template_kwargs=dict(options.chat_template_kwargs) or None, harmony=harmony)


class TargetSession:
    """The endpoints and renderer of one target, shared by every run built on it (`async with`, `probe_run`)."""

    def __init__(self, target: ProbeTarget, options: ProbeOptions) -> None:
        from userturn.client.http.endpoint import Endpoint, EndpointConfig

        self.target = target
        self.options = options
        self.endpoints: list[Endpoint] = [
            Endpoint(EndpointConfig(base_url=url, api_key_env=target.api_key_env, api_key_file=target.api_key_file,
                                    request_timeout=options.request_timeout, max_retries=options.max_retries,
                                    concurrency=options.concurrency,
                                    max_response_bytes=options.max_response_bytes))
            for url in target.base_urls]
        self._renderer: PromptRenderer | None = None
        self.engine_traits = target.engine_traits  # with what the server reports about itself after `check`
        self._notices: list[str] = []  # said by the first run that starts generating (`check` finds them)

    @property
    def renderer(self) -> PromptRenderer:
        """Loaded on first use (chat mode needs none)."""
        if self._renderer is None:
            self._renderer = load_renderer(self.target, self.options)
        return self._renderer

    async def check(self) -> None:
        """Every endpoint answers and serves the model (else an error) before anything is generated; a bare URL's
        server is recognised where it says what it is (`client.http.server_kinds`); warns when the served weights
        are not the tokenizer's; reads the sampling defaults a self-describing server reports; says once what cannot
        be known about the engine's sampler and seed."""
        from userturn.client.http.server_facts import applied_traits, engine_notices, weights_warning
        from userturn.client.http.server_kinds import described_traits

        t = self.target
        served_by = [await endpoint.check(t.model) for endpoint in self.endpoints]
        if self.endpoints:
            if t.engine_traits.external:
                found = await described_traits(self.endpoints[0], t.model, recognisable_engines())
                self.engine_traits = found or t.engine_traits
            else:
                self.engine_traits = await applied_traits(self.endpoints[0], t.engine_traits)
        for endpoint, served in zip(self.endpoints, served_by, strict=True):
            warning = await weights_warning(endpoint, served, t.model, t.tokenizer, self.engine_traits)
            if warning:
                log.warning("userturn: warning: %s", warning)
        self._notices = engine_notices(self.engine_traits, [e.base_url for e in self.endpoints])

    def check_mode(self, mode: Mode) -> None:
        """A one-line UserError where `mode` cannot probe this server (raw mode on a server that templates a
        completion's prompt again: Ollama); after `check`."""
        from userturn.client.http.server_facts import raw_mode_refusal

        refusal = raw_mode_refusal(self.engine_traits, [e.base_url for e in self.endpoints], self.target.model)
        if mode == "raw" and refusal:
            raise UserError(refusal)

    async def __aenter__(self) -> TargetSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for endpoint in self.endpoints:
            await endpoint.aclose()

    def settings(self, *, dataset: str, mode: Mode, perturbations: Sequence[str],
                 assistant_from: Literal["dataset", "model"]) -> ProbeSettings:
        """The `ProbeSettings` of one run on this target: the one place options become request settings."""
        from userturn.client.probe.pipeline import ProbeSettings

        o, t = self.options, self.target
        return ProbeSettings(
            **{name: getattr(o, name) for name in o.model_fields_set}, model=t.model, dataset=dataset,
            perturbations=list(perturbations), mode=mode, assistant_from=assistant_from, extra_stop=list(t.stop),
            extra_stop_token_ids=list(t.stop_token_ids), extra_body=dict(t.extra_body),
            template_kwargs=o.rendered_kwargs if mode == "raw" else {}, engine_traits=self.engine_traits)

    def probe_run(self, items: Sequence[DatasetItem], *, dataset: str, mode: Mode, perturbations: Sequence[str],
                  assistant_from: Literal["dataset", "model"], out_path: str, judge: JudgeHook | None = None,
                  progress: bool = True, progress_title: str | None = None,
                  partner_pool: Sequence[DatasetItem] | None = None, resume_hint: str | None = None) -> ProbeRun:
        """One `ProbeRun` of `items` on this target, with perturbations, task scoring and the chat-mode role flip."""
        from userturn.client.probe.perturb import perturb
        from userturn.client.probe.pipeline import ProbeRun
        from userturn.client.probe.scoring import score
        from userturn.client.render.chat_mode import role_flip_messages

        self.check_mode(mode)
        extra: dict[str, Any] = {"resume_hint": resume_hint} if resume_hint else {}
        extra["notices"], self._notices = self._notices, []
        return ProbeRun(items, self.settings(dataset=dataset, mode=mode, perturbations=perturbations,
                                             assistant_from=assistant_from),
                        endpoints=self.endpoints, renderer=self.renderer if mode == "raw" else None,
                        out_path=out_path, judge=judge, progress=progress, progress_title=progress_title,
                        partner_pool=partner_pool, perturb=perturb,
                        scorer=functools.partial(score, chosen=self.options.scorer), role_flip=role_flip_messages,
                        **extra)


def assistant_source(items: Sequence[DatasetItem], choice: Literal["dataset", "model", "auto"] | None,
                     how: str = "--assistant-from model") -> Literal["dataset", "model"]:
    """Where the assistant turn comes from: as chosen; unchosen (auto/None), the dataset when every item ends with
    one and the model when none does. Refused (a UserError, before anything launches): `dataset` with an item that
    has no assistant turn, and, unchosen, a mix (one malformed row would switch every item to the model's turn).
    `how`: the flag or key that chooses model-written turns, named in the message."""
    if choice == "model":
        return "model"
    from userturn.client.data.item_source import item_source

    open_items = item_source(items).first_open()  # known without parsing for a file kept on disk
    if open_items is None:
        return "dataset"
    count, first, where = open_items
    at = f"{where}: " if where else ""
    if choice == "dataset":  # no assistant turn to probe after
        raise UserError(f"{at}assistant turn from the dataset, but item {first!r} ends with a user turn ({count} of "
                        f"{len(items)} items do); use {how} to have the model answer")
    if count == len(items):
        return "model"
    raise UserError(f"{at}item {first!r} has no assistant turn to probe ({count} of {len(items)} items lack one, "
                    f"the others end with one): fix them, or choose model-written assistant turns for every item with "
                    f"{how}")
