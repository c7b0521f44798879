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
    known, or that the engine ignores the seed."""
    where = ", ".join(urls)
    sent = ", ".join(f"{name}={value:g}" for name, value in traits.neutral_sampler.items())
    if traits.external:
        return [f"userturn: note: {where} is an external endpoint: its sampling defaults and whether it honours the "
                f"seed cannot be known (recorded as server_sampler_defaults: null, seed_honoured: null); each request "
                f"states temperature, seed and {sent or 'no other sampling field'} (--top-p, --top-k, --min-p set "
                "others), and reruns need not repeat its records"]
    if traits.seed_honoured is False:
        return [f"userturn: warning: the {traits.engine} server at {where} does not honour a request's seed: sampled "
                "records cannot be reproduced (recorded as seed_honoured: false)"]
    return []
