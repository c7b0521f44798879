"""What a server says about itself beyond `/v1/models`, read where its engine keeps it (`EngineTraits`): the weights
it loaded (SGLang's `/model_info`: its `/v1/models` `root` is the served name) and the sampling defaults it applies
(llama-server's `/props`), and the one-line notices a run gives about what the engine does with the sampler and
the seed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from userturn.client.http.endpoint import Endpoint, ServedModel, root_mismatch
from userturn.core.engine_traits import EngineTraits

# The sampling fields a self-describing server's defaults are recorded by (llama-server's names; what it reports
# beyond them, such as n_predict or the seed, is not a sampling default).
REPORTED_SAMPLER_FIELDS = ("top_k", "top_p", "min_p", "typical_p", "top_n_sigma", "xtc_probability",
                           "repeat_penalty", "presence_penalty", "frequency_penalty", "dry_multiplier", "mirostat")


async def weights_warning(endpoint: Endpoint, served: list[ServedModel], model: str, tokenizer: str | None,
                          traits: EngineTraits) -> str | None:
    """`root_mismatch` of the weights the server loaded, read where the engine reports them: the `model_path` of
    `traits.weights_route` where it has one (nothing to compare when that route answers none), else the `root` of
    `/v1/models`."""
    if traits.weights_route is None:
        return root_mismatch(served, model, tokenizer)
    info = await endpoint.root_json(traits.weights_route)
    path = info.get("model_path") if info is not None else None
    return root_mismatch([ServedModel(id=model, root=path if isinstance(path, str) else None)], model, tokenizer)


def reported_sampler(props: Mapping[str, Any] | None) -> dict[str, float | int] | None:
    """The sampling defaults in a `/props` reply (`default_generation_settings`, or its `params` in newer
    llama-server builds), by `REPORTED_SAMPLER_FIELDS`; None when it reports none."""
    settings = props.get("default_generation_settings") if props is not None else None
    if not isinstance(settings, dict):
        return None
    params = settings["params"] if isinstance(settings.get("params"), dict) else settings
    found = {name: value for name in REPORTED_SAMPLER_FIELDS
             if isinstance(value := params.get(name), int | float) and not isinstance(value, bool)}
    return found or None


async def applied_traits(endpoint: Endpoint, traits: EngineTraits) -> EngineTraits:
    """`traits` with the sampling defaults the server reports at `traits.sampler_route` (what it applies, which wins
    over what its launch is expected to give); `traits` as they are where it has no such route or reports none."""
    if traits.sampler_route is None:
        return traits
    reported = reported_sampler(await endpoint.root_json(traits.sampler_route))
    return traits if reported is None else traits.model_copy(update={"server_sampler_defaults": reported})


def engine_notices(traits: EngineTraits, urls: Sequence[str]) -> list[str]:
    """What a run says once about its endpoint: that an external one's sampler defaults and seed handling cannot be
    known; what a recognised one said it is and what it applies; that a running llama-server's role tokens may be
    invisible; that the engine ignores the seed; that its records depend on the batch."""
    where = ", ".join(urls)
    sent = ", ".join(f"{name}={value:g}" for name, value in traits.neutral_sampler.items())
    if traits.external:
        return [f"userturn: note: {where} is an external endpoint: its sampling defaults and whether it honours the "
                f"seed cannot be known (recorded as server_sampler_defaults: null, seed_honoured: null); each request "
                f"states temperature, seed and {sent or 'no other sampling field'} (--top-p, --top-k, --min-p set "
                "others), and reruns need not repeat its records"]
    notices = []
    if traits.described:
        defaults = traits.server_sampler_defaults
        shown = "not reported" if defaults is None else ", ".join(
            f"{name}={value:g}" for name, value in defaults.items() if not _neutral({name: value})) or "all off"
        notices.append(f"userturn: note: {where} is {traits.described}: recorded as engine {traits.engine}, with "
                       f"its sampling defaults ({shown}) as server_sampler_defaults; each request states temperature, "
                       f"seed and {sent}")
    if traits.fixed_sampler_hint and not _neutral(traits.server_sampler_defaults):
        notices.append(f"userturn: warning: {where} ({traits.described or traits.engine}) applies the model's own "
                       "top_k, min_p and repeat_penalty (its /v1/completions cannot set them): T=1 is not plain "
                       f"temperature sampling; {traits.fixed_sampler_hint}")
    if traits.special_tokens_hint and traits.described:
        notices.append(f"userturn: warning: whether the server at {where} ({traits.described}) keeps the special "
                       "tokens it generates cannot be seen: without that a role token the model generates (e.g. "
                       "<|im_start|>) vanishes from the text and a turn that runs into the next header is not "
                       f"recognised; {traits.special_tokens_hint}")
    if traits.seed_honoured is False:
        notices.append(f"userturn: warning: the {traits.engine} server at {where} does not honour a request's seed: "
                       "sampled records cannot be reproduced (recorded as seed_honoured: false)")
    if traits.batch_invariant is False:
        way_out = ("start it with -np 1 --no-cache-prompt and probe with --concurrency 1" if traits.described else
                   "launch it with one slot and no prompt cache (probe.concurrency: 1, extra_args: "
                   "[--no-cache-prompt])")
        notices.append(f"userturn: warning: the {traits.engine} server at {where} computes a request together with "
                       "others (several slots, or a reused prompt cache): its records are not reproducible, a rerun "
                       f"differs (recorded as batch_invariant: false); for reproducible records {way_out}")
    return notices


# Each sampler an engine may apply by default, at the value that turns it off.
NEUTRAL_VALUES: dict[str, float | int] = {
    "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0,
    "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "mirostat": 0}


def _neutral(defaults: Mapping[str, float | int] | None) -> bool:
    """Whether every default is off (top_k -1 is off as 0 is); None (not known) is not."""
    if defaults is None:
        return False
    return all(value == NEUTRAL_VALUES.get(name, value) or (name == "top_k" and value < 0)
               for name, value in defaults.items())


def raw_mode_refusal(traits: EngineTraits, urls: Sequence[str], model: str) -> str | None:
    """The one-line refusal of raw mode on a server that templates a completion's prompt again (Ollama's
    /v1/completions), with the ways out; None where raw prompts pass through untouched."""
    if not traits.templates_prompt:
        return None
    return (f"{', '.join(urls)} is {traits.described or traits.engine}: its /v1/completions wraps a prompt in the "
            f"chat template of {model} again, so the user-turn prompt would arrive as a user message and the reply, "
            "an assistant turn, be stored as a user turn; serve a copy whose template passes prompts through (a "
            "Modelfile with FROM " + model + ", TEMPLATE {{ .Prompt }}, PARAMETER top_k 0, PARAMETER "
            "repeat_penalty 1; `ollama create NAME -f Modelfile`; probe NAME), use llama-server, or probe in chat "
            "mode (--mode chat; modes: [chat] in an experiment)")
