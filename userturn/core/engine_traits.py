"""What a serving engine does with a completion request, as the engine's own code says: the one contract between
an engine's definition (userturn.serve.engines, which fills it) and the probe (userturn.client, which reads it).

The probe never guesses an engine's behaviour from its name: a launched engine hands its traits to the probe; an
endpoint given by URL alone gets `EXTERNAL`, whose unknowns stay unknown (None) and are said to be so."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class EngineTraits(BaseModel):
    """One engine's request-side behaviour. None means the engine does not say (an external endpoint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str  # the engine's kind, the registry's name for it (`userturn.serve.engines.ENGINES`)
    # Whether a per-request `seed` reaches the sampler (SGLang: only under --enable-deterministic-inference).
    seed_honoured: bool | None
    # Whether a request's output is independent of what else the server computes (other slots in the batch, a reused
    # prompt cache): False for llama-server with more than one slot or its prompt cache on, whose reruns differ
    # even with the seed honoured; None when not known. Recorded in the configuration only when known.
    batch_invariant: bool | None = None
    # What the server applies to a sampling field a request leaves out (e.g. {"top_k": 40} for llama-server without
    # flags); {} when the launch makes every default neutral; None when unknown.
    server_sampler_defaults: dict[str, float | int] | None
    # The neutral value of each sampling field this engine accepts ({"top_p": 1.0, "top_k": -1, "min_p": 0.0});
    # the probe sends these unless the user sets a value. Fields absent here are never sent by default.
    neutral_sampler: dict[str, float | int]
    # Largest number of `stop` strings the engine accepts in one request (vLLM and OpenAI: 4); None: no limit known.
    max_stop_strings: int | None
    # Whether `stop_token_ids` in a request is honoured (llama-server ignores it).
    honours_stop_token_ids: bool
    # The completion choice's field naming the stop that matched (SGLang `matched_stop`, vLLM `stop_reason`).
    stop_reason_field: str | None
    # The chat message's field carrying reasoning text (SGLang `reasoning_content`, vLLM `reasoning`).
    reasoning_field: str | None
    # A GET route under the server's root (not the /v1 base) whose JSON `model_path` names the loaded weights (SGLang
    # `/model_info`: its /v1/models `root` is the served name); None: /v1/models `root` does (vLLM).
    weights_route: str | None = None
    # A GET route under the server's root whose JSON `default_generation_settings` reports the sampling defaults the
    # server applies (llama-server `/props`); None: the server does not report them.
    sampler_route: str | None = None
    # A GET route under the server's root that only this engine answers, and so names it when a run is given a bare
    # URL (llama-server `/props`, SGLang `/get_server_info`, vLLM `/version`, Ollama `/api/version`); None: it cannot
    # be recognised.
    identity_route: str | None = None
    # Whether the server wraps a completion's prompt in the model's chat template again (Ollama's /v1/completions
    # unless the model's TEMPLATE is `{{ .Prompt }}`): a raw-mode prompt would become a user message, and the reply
    # an assistant turn, so raw mode is refused.
    templates_prompt: bool = False
    # How to turn off sampling defaults a request cannot override (Ollama's /v1/completions cannot set top_k, min_p or
    # repeat_penalty), said in a warning when they are not neutral; None: a request sets every sampler it sends.
    fixed_sampler_hint: str | None = None
    # How to make a running server keep the role tokens a model generates in the text (llama-server drops them
    # without -sp, which its routes do not report), said once for a server recognised at a URL; None: nothing to do.
    special_tokens_hint: str | None = None
    # What the server said it is when it was recognised at a URL (e.g. "llama-server b6500"); None: launched here, or
    # not recognised.
    described: str | None = None

    @property
    def external(self) -> bool:
        """An endpoint given by URL: what serves it is not known (`EXTERNAL`)."""
        return self.engine == EXTERNAL.engine


EXTERNAL = EngineTraits(
    engine="external", seed_honoured=None, server_sampler_defaults=None, neutral_sampler={"top_p": 1.0},
    max_stop_strings=4, honours_stop_token_ids=False, stop_reason_field=None, reasoning_field="reasoning_content",
)

OLLAMA = EngineTraits(
    # Ollama's openai/openai.go FromCompleteRequest maps only temperature, top_p (0 → 1.0), seed, stop, max_tokens
    # and the presence/frequency penalties of a /v1/completions request: top_k, min_p and repeat_penalty come from
    # the model's Modelfile PARAMETERs, else api/types.go DefaultOptions (top_k 40, repeat_penalty 1.1 before 0.32.10
    # and 1.0 since), and are recorded as the server's defaults (read from POST /api/show).
    engine="ollama", seed_honoured=True, server_sampler_defaults=None, neutral_sampler={"top_p": 1.0},
    max_stop_strings=None, honours_stop_token_ids=False, stop_reason_field=None, reasoning_field="reasoning",
    identity_route="/api/version", templates_prompt=True,
    fixed_sampler_hint="set them off in the Modelfile (PARAMETER top_k 0, PARAMETER repeat_penalty 1) and `ollama "
                       "create` it again",
)
