"""The one options model of a probe run: how prompts are rendered, how user turns are sampled, how hard the
endpoint is pushed.

Every source of settings (CLI flags, an experiment and its model entries, a post-training file, a manifest's
`probe:` section) is an `Options`, None meaning "not set here"; `resolve` merges them by precedence and fills in the
defaults (`ProbeOptions`). Each field's `Role` says whether it is sent in every user-turn request body and recorded
in the configuration (and fingerprint). An option recorded before it could be unset (top_p) is recorded as null
when unset; a newer one only once set, so existing files' fingerprints do not change. A `sampler` option is sent at
the engine's neutral value when unset (`userturn.core.engine_traits.EngineTraits.neutral_sampler`), and recorded
as sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from userturn.core import defaults

RendererName = Literal["auto", "chat_template", "harmony"]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Probability = Annotated[float, Field(gt=0, le=1)]
UnitFloat = Annotated[float, Field(ge=0, le=1)]
TopK = Annotated[int, Field(ge=-1)]


def _temperature_value(temperature: float) -> float:
    """`core.records.temperature_value`, loaded on first use: `Options` is read when the command line's parser is
    built (its flags are generated from it), before any record is needed."""
    from userturn.core.records import temperature_value

    return temperature_value(temperature)


# A probed temperature, taken as `temperature_value` says (the same temperature: the same key, seed and request).
Temperature = Annotated[float, Field(ge=0), AfterValidator(_temperature_value)]


@dataclass(frozen=True)
class Role:
    """What an option shapes, kept in its annotation. `null_recorded`: recorded as null when unset; `assistant`:
    recorded only when the model writes the assistant turn; `sampler`: a sampling field an engine has a neutral value
    for (sent at that value when unset)."""

    sent: bool = False
    recorded: bool = False
    null_recorded: bool = False
    assistant: bool = False
    sampler: bool = False


SENT = Role(sent=True, recorded=True)  # a sampling setting of the user-turn request
SAMPLER = Role(sent=True, recorded=True, sampler=True)  # a sampling field with an engine-neutral value
RECORDED = Role(recorded=True)  # shapes the generations without being sent as is (the run seed)
ASSISTANT = Role(recorded=True, null_recorded=True, assistant=True)  # samples a model-written assistant turn
OTHER = Role()  # renders prompts (recorded through the template's identity), picks samples or pushes the endpoint


@dataclass(frozen=True)
class Flag:
    """How an option reads on the command line, where `--NAME` with its description and type is not all: the
    value's placeholder, its flag group (`endpoint`: how hard the endpoint is pushed), the words for an unset value
    no default names, and `flag=False` for an option no flag sets (`userturn/cli/option_flags.py` reads these)."""

    metavar: str | None = None
    group: Literal["probe", "endpoint"] = "probe"
    unset: str | None = None
    flag: bool = True


ENDPOINT = Flag(group="endpoint")


class Options(BaseModel):
    """What one source says about a probe run; None means "not set here" (a lower layer or the default decides)."""

    model_config = ConfigDict(extra="forbid")

    # how prompts are rendered (the target's tokenizer and template; recorded as the template's identity)
    tokenizer: Annotated[str | None, OTHER, Flag("DIR_HUB_ID_OR_GGUF")] = Field(
        default=None, description="tokenizer with the model's chat template (local dir, hub id, or a .gguf file / "
        "pkg:PACKAGE/file.gguf: its metadata); required in raw mode")
    chat_template: Annotated[str | None, OTHER, Flag("FILE")] = Field(
        default=None, description="override the tokenizer's chat template")
    renderer: Annotated[RendererName | None, OTHER] = Field(
        default=None, description="how prompts are rendered: the chat template, or Harmony (gpt-oss); auto: Harmony "
        "for a gpt-oss tokenizer without a chat template of its own")
    enable_thinking: Annotated[bool | None, OTHER] = Field(default=None, description="passed to the chat template")
    chat_template_kwargs: Annotated[dict[str, Any] | None, OTHER] = Field(
        default=None, description="extra chat-template variables (merged key by key across layers)")
    # which samples are drawn (each record's identity, not its configuration)
    temperatures: Annotated[list[Temperature] | None, OTHER] = Field(default=None, min_length=1)
    samples: Annotated[PositiveInt | None, OTHER, Flag("K")] = Field(
        default=None, description="samples per item and temperature")
    # how each user turn is sampled
    max_tokens: Annotated[PositiveInt | None, SENT, Flag("M")] = Field(
        default=None, description="max tokens of the user turn")
    top_p: Annotated[Probability | None, Role(sent=True, recorded=True, null_recorded=True, sampler=True),
                     Flag("P", unset="the engine's neutral value, 1")] = Field(
        default=None, description="nucleus sampling, in (0, 1]")
    top_k: Annotated[TopK | None, SAMPLER,
                     Flag("K", unset="the engine's neutral value where it takes top_k, else not sent")] = Field(
        default=None, description="top-k sampling; -1: no limit")
    min_p: Annotated[UnitFloat | None, SAMPLER,
                     Flag("P", unset="the engine's neutral value, 0, where it takes min_p, else not sent")] = Field(
        default=None, description="min-p sampling, in [0, 1]")
    seed: Annotated[int | None, RECORDED, Flag("S")] = Field(
        default=None, description="run seed; each sample's seed derives from it")
    send_stop_token_ids: Annotated[bool | None, OTHER] = Field(
        default=None, description="also send stop_token_ids (SGLang/vLLM extension; needed where the end-of-turn "
        "token is not an EOS, e.g. gpt-oss <|end|>; recorded as the ids sent)")
    # how a model-written assistant turn is sampled
    assistant_temperature: Annotated[NonNegativeFloat | None, ASSISTANT, Flag("T")] = Field(
        default=None, description="temperature of a model-written assistant turn")
    assistant_max_tokens: Annotated[PositiveInt | None, ASSISTANT, Flag("M")] = Field(
        default=None, description="max tokens of a model-written assistant turn")
    # what the run accepts and adds
    allow_special_tokens: Annotated[bool | None, OTHER] = Field(
        default=None, description="probe items whose messages contain the tokenizer's special tokens (refused by "
        "default: they forge turns); their records get special_tokens_in_content: true")
    record_meta: Annotated[dict[str, Any] | None, OTHER, Flag(flag=False)] = Field(
        default=None, description="copied into every record's meta (a trained model's provenance)")
    controls: Annotated[bool | None, OTHER] = Field(
        default=None, description="also write, without generating, each item's own human next turn (model human) "
        "and another item's (model human-shuffled) where the dataset has one (meta.second_turn, e.g. mt-bench): "
        "judged like any record, they show whether the judge tells them apart")
    scorer: Annotated[str | None, OTHER] = Field(
        default=None, description="task scorer of the items whose meta.scorer names none (client/probe/scoring.py "
                                  "SCORERS; default: the dataset's name, if it names one)")
    # how hard the endpoint is pushed
    concurrency: Annotated[PositiveInt | None, OTHER, ENDPOINT] = Field(default=None, description="requests in flight")
    rpm: Annotated[PositiveFloat | None, OTHER, Flag(group="endpoint", unset="no limit")] = Field(
        default=None, description="requests-per-minute limit")
    tpm: Annotated[PositiveFloat | None, OTHER, Flag(group="endpoint", unset="no limit")] = Field(
        default=None, description="tokens-per-minute limit (prompt + max tokens)")
    request_timeout: Annotated[PositiveFloat | None, OTHER, Flag("S", "endpoint")] = Field(
        default=None, description="per-attempt deadline in seconds; a hung request is cut and retried")
    max_retries: Annotated[NonNegativeInt | None, OTHER, ENDPOINT] = Field(
        default=None, description="retries after the first attempt")
    max_response_bytes: Annotated[PositiveInt | None, OTHER,
                                  Flag("B", "endpoint", unset="256 bytes per requested token + 1 MiB")] = Field(
        default=None, description="cap on each response body")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order (a subclass's own fields are not options)."""
        return tuple(Options.model_fields)

    def layer(self) -> Options:
        """The options alone, without a subclass's other fields (an experiment's models, a manifest's stops)."""
        return Options.model_construct(**{name: getattr(self, name) for name in Options.names()})

    def set_values(self) -> dict[str, Any]:
        """{name: value} of the options this layer sets."""
        return {name: value for name in Options.names() if (value := getattr(self, name)) is not None}

    def merge(self, other: Options) -> Options:
        """This layer under `other`: `other`'s set options win; `chat_template_kwargs` merge key by key."""
        mine, theirs = self.set_values(), other.set_values()
        merged = {**mine, **theirs}
        if "chat_template_kwargs" in mine and "chat_template_kwargs" in theirs:
            merged["chat_template_kwargs"] = {**mine["chat_template_kwargs"], **theirs["chat_template_kwargs"]}
        return Options.model_construct(**merged)

    def request_fields(self) -> dict[str, Any]:
        """The `SENT` options that are set, as sent in every user-turn request body."""
        return {name: value for name in sent_names() if (value := getattr(self, name)) is not None}

    def recorded(self, *, assistant_by_model: bool) -> dict[str, Any]:
        """The recorded options (JSON values) as the run's configuration holds them (`core.fingerprint`)."""
        out = {}
        for name, role in roles().items():
            value = getattr(self, name) if role.recorded and (assistant_by_model or not role.assistant) else None
            if role.recorded and (value is not None or role.null_recorded):
                out[name] = value
        return out


def _role(name: str) -> Role:
    found = [m for m in Options.model_fields[name].metadata if isinstance(m, Role)]
    if len(found) != 1:
        raise TypeError(f"Options.{name} must declare exactly one Role in its annotation")
    return found[0]


@cache
def roles() -> dict[str, Role]:
    """{option: its role}, in declaration order."""
    return {name: _role(name) for name in Options.names()}


@cache
def sent_names() -> tuple[str, ...]:
    """The options sent as is in every user-turn request body (when set)."""
    return tuple(name for name, role in roles().items() if role.sent)


@cache
def sampler_names() -> tuple[str, ...]:
    """The sampling options an engine may have a neutral value for (`Role.sampler`)."""
    return tuple(name for name, role in roles().items() if role.sampler)


def is_neutral(name: str, value: Any) -> bool:
    """Whether `value` of sampler option `name` leaves sampling as it is (top_p 1, min_p 0, top_k 0 or -1): what an
    unset sampler option is sent as, whatever the engine's spelling of it."""
    if type(value) not in (int, float):
        return False
    neutral: dict[str, tuple[float, ...]] = {"top_p": (1,), "min_p": (0,), "top_k": (0, -1)}
    return value in neutral.get(name, ())


class ProbeOptions(Options):
    """The options a probe runs with: every layer merged, then the defaults (`userturn/core/defaults.py`)."""

    renderer: RendererName = "auto"
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    temperatures: list[Temperature] = Field(default_factory=lambda: list(defaults.TEMPERATURES), min_length=1)
    samples: PositiveInt = defaults.SAMPLES
    max_tokens: PositiveInt = defaults.MAX_TOKENS
    seed: int = defaults.SEED
    send_stop_token_ids: bool = False
    assistant_temperature: NonNegativeFloat = defaults.ASSISTANT_TEMPERATURE
    assistant_max_tokens: PositiveInt = defaults.ASSISTANT_MAX_TOKENS
    allow_special_tokens: bool = False
    controls: bool = False
    record_meta: dict[str, Any] = Field(default_factory=dict)
    concurrency: PositiveInt = defaults.CONCURRENCY
    request_timeout: PositiveFloat = defaults.REQUEST_TIMEOUT_S
    max_retries: NonNegativeInt = defaults.MAX_RETRIES

    @property
    def rendered_kwargs(self) -> dict[str, Any]:
        """The chat-template variables the renderer gets (and records carry in `config.template_kwargs`)."""
        merged = dict(self.chat_template_kwargs)
        if self.enable_thinking is not None:
            merged["enable_thinking"] = self.enable_thinking
        return merged


def merged(layers: Iterable[Options]) -> Options:
    """`layers`, lowest precedence first, merged into one."""
    out = Options()
    for layer in layers:
        out = out.merge(layer)
    return out


def resolve(layers: Sequence[Options]) -> ProbeOptions:
    """The options a probe runs with, from `layers` highest precedence first (the first layer that sets an option
    wins; `chat_template_kwargs` merge key by key), then the defaults."""
    return ProbeOptions(**merged(reversed(layers)).set_values())


__all__ = ["ASSISTANT", "OTHER", "RECORDED", "SENT", "Flag", "Options", "ProbeOptions", "RendererName", "Role",
           "is_neutral", "merged", "resolve", "roles", "sampler_names", "sent_names"]
