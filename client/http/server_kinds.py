"""Which engine serves a bare `--base-url`, where the server can say: each engine's `EngineTraits.identity_route`
is asked in turn (llama-server `GET /props`, SGLang `GET /get_server_info`, vLLM `GET /version`, Ollama
`GET /api/version`), and the first whose answer has that engine's shape names it. What the answer reports about the
sampler, the seed and the batch replaces the launched engine's assumptions; a server that answers none of them stays
`EXTERNAL` (unknown)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from userturn.client.http.endpoint import Endpoint
from userturn.client.http.server_facts import reported_sampler
from userturn.core.engine_traits import EngineTraits

# Ollama's api/types.go DefaultOptions for the samplers a /v1/completions request cannot set (openai/openai.go
# FromCompleteRequest maps only temperature, top_p, seed, stop, max_tokens and the presence/frequency penalties);
# repeat_penalty was 1.1 before 0.32.10 ("api: stop applying repeat_penalty 1.1 to models that don't set one").
OLLAMA_DEFAULTS: dict[str, float | int] = {"top_k": 40, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}
OLLAMA_OLD_REPEAT_PENALTY = (1.1, (0, 32, 10))
OLLAMA_PASS_THROUGH = "{{ .Prompt }}"  # a Modelfile TEMPLATE that renders the prompt as it came
# A running SGLang or vLLM applies the model's generation_config.json to what a request leaves out (their defaults,
# `--sampling-defaults model` and `--generation-config auto`), repetition_penalty included (e.g. 1.05 for Qwen2.5):
# a request to one sends it neutral too, beside the engine's own neutral top_p, top_k and min_p.
NEUTRAL_REPETITION = {"repetition_penalty": 1.0}

Reader = Callable[[Endpoint, str, Mapping[str, Any], EngineTraits], Awaitable[EngineTraits | None]]


def _version(text: object) -> tuple[int, ...] | None:
    parts = str(text).split("-")[0].split(".")
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else None


async def _llamacpp(endpoint: Endpoint, model: str, props: Mapping[str, Any], traits: EngineTraits
                    ) -> EngineTraits | None:
    """llama-server's /props: its sampling defaults, and more than one slot (`total_slots`) makes each request's
    output depend on the others (whether its prompt cache is on is not reported: unknown with one slot)."""
    if not isinstance(props.get("default_generation_settings"), dict):
        return None
    slots = props.get("total_slots")
    build = props.get("build_info")
    return traits.model_copy(update={
        "server_sampler_defaults": reported_sampler(props),
        "batch_invariant": False if isinstance(slots, int) and slots > 1 else None,
        "described": f"llama-server{f' {build}' if isinstance(build, str) else ''}"
                     f"{f', {slots} slots' if isinstance(slots, int) else ''}"})


async def _sglang(endpoint: Endpoint, model: str, info: Mapping[str, Any], traits: EngineTraits
                  ) -> EngineTraits | None:
    """SGLang's /get_server_info (its server arguments and version): `sampling_defaults: openai` leaves every
    unset field neutral ('model', the default, applies generation_config.json: unknown here); a request's seed
    reaches the sampler only under `enable_deterministic_inference`."""
    nested = info.get("server_args")
    args: Mapping[str, Any] = nested if isinstance(nested, dict) else info
    if not isinstance(info.get("version"), str) or "model_path" not in args:
        return None
    openai = args.get("sampling_defaults") == "openai"
    return traits.model_copy(update={
        "server_sampler_defaults": {} if openai else None,
        "neutral_sampler": traits.neutral_sampler if openai else {**traits.neutral_sampler, **NEUTRAL_REPETITION},
        "seed_honoured": args.get("enable_deterministic_inference") is True,
        "described": f"SGLang {info['version']}"})


async def _vllm(endpoint: Endpoint, model: str, info: Mapping[str, Any], traits: EngineTraits) -> EngineTraits | None:
    """vLLM's /version: the version only; the sampling defaults it took from the model's generation_config.json
    (its default `--generation-config auto`) are not reported."""
    if set(info) != {"version"} or not isinstance(info["version"], str):
        return None
    return traits.model_copy(update={"server_sampler_defaults": None, "described": f"vLLM {info['version']}",
                                     "neutral_sampler": {**traits.neutral_sampler, **NEUTRAL_REPETITION}})


def ollama_parameters(text: object) -> dict[str, float | int]:
    """The numeric PARAMETERs of an /api/show `parameters` text (one `name value` per line, Go's %#v)."""
    out: dict[str, float | int] = {}
    for line in str(text or "").splitlines():
        name, _, value = line.strip().partition(" ")
        try:
            number = float(value.strip())
        except ValueError:
            continue
        out[name] = int(number) if number.is_integer() and "." not in value else number
    return out


async def _ollama(endpoint: Endpoint, model: str, info: Mapping[str, Any], traits: EngineTraits
                  ) -> EngineTraits | None:
    """Ollama's /api/version, then POST /api/show for the model: a TEMPLATE of exactly `{{ .Prompt }}` (and no
    built-in renderer or parser, which would replace it, nor Modelfile MESSAGEs, which it would render before the
    prompt) passes a completion's prompt through; the samplers a /v1/completions request cannot set are the model's
    PARAMETERs over Ollama's defaults."""
    if set(info) != {"version"} or not isinstance(info["version"], str):
        return None
    show = await endpoint.root_json("/api/show", {"model": model}) or {}
    passes = (str(show.get("template", "")).strip() == OLLAMA_PASS_THROUGH and not show.get("renderer")
              and not show.get("parser") and not show.get("messages"))
    defaults = dict(OLLAMA_DEFAULTS)
    version = _version(info["version"])
    penalty, since = OLLAMA_OLD_REPEAT_PENALTY
    if version is not None and version < since:
        defaults["repeat_penalty"] = penalty
    params = ollama_parameters(show.get("parameters"))
    applied = {name: params.get(name, value) for name, value in defaults.items()}
    return traits.model_copy(update={"server_sampler_defaults": applied if show else None,
                                     "templates_prompt": not passes, "described": f"Ollama {info['version']}"})


# Each identity route's answer, read (the route names the shape of its answer; the engine is the traits' own).
READERS: dict[str, Reader] = {"/props": _llamacpp, "/get_server_info": _sglang, "/version": _vllm,
                              "/api/version": _ollama}


async def described_traits(endpoint: Endpoint, model: str, candidates: Sequence[EngineTraits]) -> EngineTraits | None:
    """The traits of the engine that answers its `identity_route` at `endpoint` with that engine's shape (the first
    of `candidates`, in order), updated with what the answer reports; None when none does."""
    for traits in candidates:
        reader = READERS.get(traits.identity_route or "")
        if traits.identity_route is None or reader is None:
            continue
        answer = await endpoint.root_json(traits.identity_route)
        if answer is not None and (found := await reader(endpoint, model, answer, traits)) is not None:
            return found
    return None
