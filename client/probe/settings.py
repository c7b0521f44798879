"""What a probe run is asked to do (`ProbeSettings`), what it is given (renderer, judge, perturbation and scoring
shapes) and the small values its stages pass on (`Job`, `AssistantTurn`, `ProbeSummary`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import Field

from userturn.client.data.dataset import DatasetItem
from userturn.client.probe.perturb import Perturbed
from userturn.client.render.special_tokens import SpecialTokens
from userturn.core.engine_traits import EXTERNAL, EngineTraits
from userturn.core.errors import UserError
from userturn.core.options import ProbeOptions, sampler_names, sent_names
from userturn.core.records import Message, ProbeRecord, RendererInfo


class Renderer(Protocol):
    """What the pipeline needs from a chat-template renderer (client.render.templates.PromptRenderer): what it
    records (`template_sha256`, `engine`, `info`: None for a renderer that cannot be replayed), its stops and the
    single-token texts a stop may be sent as (`token_ids`), its `name` (the tokenizer, named in errors) and the
    special tokens content must not hold (None: none checked)."""

    template_sha256: str
    stop: list[str]
    stop_token_ids: list[int]
    engine: str
    name: str

    @property
    def token_ids(self) -> Mapping[str, int]: ...

    @property
    def info(self) -> RendererInfo | None: ...

    @property
    def special_tokens(self) -> SpecialTokens | None: ...

    def user_turn_prompt(self, messages: list[Message], *, cache: bool = True) -> str: ...

    def count_tokens(self, text: str, *, cache: bool = True) -> int | None: ...


class JudgeCounts(Protocol):
    """What a judge hook has counted so far, in records (`userturn.judges.panel.JudgeCounters`)."""

    judged: int
    judge_failures: int
    rule_labels: int


class JudgeBacklog(Protocol):
    """The ok records of a results file a judge hook has still to label (a `judges.backlog.JudgingScan`)."""

    @property
    def todo(self) -> Sized: ...

    def records(self) -> Iterator[ProbeRecord]: ...


class JudgeHook(Protocol):
    """Labels a record as it is written (a `userturn.judges.panel.JudgePanel`) and counts what it labelled (the run
    reports `counters`); `pending_judgements(path, keys)` gives the file's ok records among `keys` it has not labelled
    yet (judged on a rerun), or None when it keeps no such backlog. The pipeline never imports the judges."""

    @property
    def counters(self) -> JudgeCounts: ...

    async def judge(self, record: ProbeRecord) -> ProbeRecord: ...

    def pending_judgements(self, path: str, keys: Collection[str]) -> JudgeBacklog | None: ...


PerturbFn = Callable[..., Perturbed | list[Message]]
ScoreFn = Callable[[str, DatasetItem, str], tuple[bool | None, dict[str, float] | None]]
RoleFlipFn = Callable[[list[Message]], list[Message]]


class ProbeSettings(ProbeOptions):
    """Everything that decides what is sent: the resolved options plus what is probed and what the target adds (its
    stops and extra body)."""

    model: str
    dataset: str
    perturbations: list[str] = Field(default_factory=lambda: ["none"])
    mode: Literal["raw", "chat"] = "raw"
    assistant_from: Literal["dataset", "model"] = "dataset"
    extra_stop: list[str] = Field(default_factory=list, description="stops added to the template-derived ones")
    extra_stop_token_ids: list[int] = Field(default_factory=list)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    template_kwargs: dict[str, Any] = Field(default_factory=dict,
                                            description="the variables the renderer was loaded with (recorded)")
    engine_traits: EngineTraits = Field(default=EXTERNAL, description="what the serving engine does with a request: "
                                        "its neutral sampler, seed, stop limits and field names")

    def sampler(self) -> dict[str, float | int]:
        """The sampling fields every user-turn request sends besides temperature and seed (and records as sent):
        each sampler option that is set, else the engine's neutral value where it lists one; a field extra_body
        sets is extra_body's (sent and recorded there)."""
        neutral = self.engine_traits.neutral_sampler
        names = [*sampler_names(), *(name for name in neutral if name not in sampler_names())]
        out: dict[str, float | int] = {}
        for name in names:
            value = getattr(self, name, None) if name in sampler_names() else None
            value = neutral.get(name) if value is None else value
            if value is not None and name not in self.extra_body:
                out[name] = value
        return out


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
OWN_FIELDS = ("model", "prompt", "messages", *sent_names(), "stop", "stop_token_ids")


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


def no_perturbation(name: str, messages: list[Message], **_: Any) -> list[Message]:
    if name != "none":
        raise ValueError(f"no perturbation function for {name!r}")
    return messages
