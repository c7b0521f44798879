"""The results file's schema: one JSON line per generated user turn (`ProbeRecord`) and one configuration line
(`ConfigLine`) per configuration, before the first record made with it, so a file (or `cat` of several) describes
itself. The fields a resume reads come first on each record line (`userturn.core.resume_index`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from userturn.core.errors import UserError
from userturn.core.taxonomy import Label

SCHEMA_VERSION = 3  # 3: the configuration in configuration lines, no longer in every record
KEY_FORMAT_SINCE = 2  # schema 1 keys joined fields unescaped and rounded the temperature (`:g`)
KEY_SEPARATOR = "|"
_KEY_ESCAPES = str.maketrans({"%": "%25", "|": "%7C"})


class Message(BaseModel):
    """One chat message. `reasoning_content` is kept out of rendered history, as templates do."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class JudgeVerdict(BaseModel):
    """One judge's verdict on one generated user turn (or a deterministic rule's)."""

    judge: str = Field(description="judge model name, or 'rule:<name>' for a pre-label")
    source: Literal["judge", "rule"] = "judge"
    status: Literal["ok", "error"]
    label: Label | None = None
    rationale: str | None = None
    raw: str | None = Field(default=None, description="raw judge output, kept when it could not be parsed")
    error: str | None = None
    prompt_sha256: str | None = Field(default=None, description="hash of the judge prompt file")
    attempts: int = 0
    quote_reasks: int = Field(default=0, description="replies that held only verdicts quoted from the generated "
                              "turn, or several different verdicts, and were asked again")
    latency_s: float | None = None


class ProbeRecord(BaseModel):
    """One generated user turn for one (model, dataset, item, mode, perturbation, temperature, sample)."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    key: str
    # What a resume reads: first on the line (userturn.core.resume_index).
    status: Literal["ok", "error"]
    judge_status: Literal["ok", "error"] | None = None
    config_fingerprint: str | None = Field(default=None, description="names the file's `ConfigLine` of this "
                                           "record (userturn.core.fingerprint); None in files from before it")
    model: str
    dataset: str
    item_id: str
    mode: Literal["raw", "chat"] = "raw"
    perturbation: str = "none"
    temperature: float
    sample: int
    seed: int
    # What was sent.
    messages: list[Message] = Field(default_factory=list, description="the conversation probed")
    assistant_source: Literal["dataset", "model", "none"] = "dataset"
    prompt_sha256: str | None = None
    template_sha256: str | None = None
    # What came back.
    user_turn: str | None = None
    finish_reason: str | None = None
    matched_stop: str | int | None = None
    error: str | None = None
    usage: Usage | None = None
    latency_s: float | None = None
    attempts: int = 0
    # Task accuracy of the assistant turn in `messages`, after perturbation (None: no reference, no scorer, or no
    # assistant turn, as with `remove`).
    reference_answer: str | None = None
    correct: bool | None = None
    task_scores: dict[str, float] | None = None
    perturbation_detail: dict[str, Any] | None = Field(default=None, description="what the perturbation changed "
                                                       "(client.probe.perturb.Perturbed.detail); None for `none`")
    # Judging (filled by judges/).
    label: Label | None = None
    label_source: Literal["rule", "judge", "majority"] | None = None
    judge_panel: str | None = Field(default=None, description="id of the judge panel that judged the record "
                                    "(judges.panel.panel_id: its judge models in order and its prompt sha256)")
    judges: list[JudgeVerdict] = Field(default_factory=list)
    meta: dict[str, Any] | None = None
    special_tokens_in_content: bool | None = Field(
        default=None, description="true: the probed messages contain the tokenizer's special tokens (allowed with "
        "--allow-special-tokens); false: checked, none; null: not checked (no tokenizer, or an older record)")


class GroupKey(NamedTuple):
    """The condition records are counted under (one report row, one rerank group); every reader groups by
    `group_key` (records) or `line_group_key` (results lines as dicts)."""

    model: str
    dataset: str
    mode: str
    perturbation: str
    temperature: float

    @property
    def series(self) -> tuple[str, str, str, str]:
        """The key without its temperature: the rows one configuration has at each temperature."""
        return self.model, self.dataset, self.mode, self.perturbation

    def unperturbed(self) -> GroupKey:
        """The key of the `none` row a perturbed row is paired with (the same everything else)."""
        return self._replace(perturbation="none")


def group_key(record: ProbeRecord) -> GroupKey:
    return GroupKey(record.model, record.dataset, record.mode, record.perturbation,
                    temperature_value(record.temperature))


def line_group_values(line: dict[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
    """The values of a results line's `GroupKey` as the line holds them (defaults filled, the temperature not yet
    a float): the report's per-line cache key. Raises KeyError on a line without model, dataset or temperature."""
    return (line["model"], line["dataset"], line.get("mode", "raw"), line.get("perturbation", "none"),
            line["temperature"])


def line_group_key(line: dict[str, Any]) -> GroupKey:
    """`group_key` of a results line read as a dict (the report's fast path); raises KeyError/TypeError/ValueError
    on a line without model, dataset or temperature."""
    model, dataset, mode, perturbation, temperature = line_group_values(line)
    return GroupKey(model, dataset, mode, perturbation, temperature_value(temperature))


class RendererInfo(BaseModel):
    """How raw-mode prompts were rendered: enough to render them again with no network and no flags."""

    model_config = ConfigDict(extra="forbid")

    tokenizer: str = Field(description="the tokenizer directory or hub id the template and tokens came from")
    renderer: Literal["jinja", "harmony"]
    chat_template: str | None = Field(default=None, description="the --chat-template given, if any")
    template: str | None = Field(default=None, description="the Jinja template text (None for harmony)")
    template_sha256: str
    enable_thinking: bool | None = None
    variables: dict[str, Any] = Field(default_factory=dict,
                                      description="the variables the template was rendered with (special tokens, "
                                      "template kwargs)")
    strip_prefix: str = Field(default="", description="the BOS text cut from the front of a rendering")
    now: str | None = Field(default=None, description="the template's clock (`strftime_now`), ISO 8601")
    harmony: dict[str, Any] | None = Field(default=None, description="harmony's settings (date, reasoning effort, "
                                           "model identity)")


class RunInfo(BaseModel):
    """The run that wrote a configuration line (secrets redacted from the command line)."""

    userturn_version: str
    started: str = Field(description="UTC, ISO 8601")
    host: str
    command: list[str]
    server: str | None = Field(default=None, description="what the endpoint's server said it is (e.g. "
                               "'llama-server b6500, 4 slots'); absent: launched here, or it said nothing")

    @model_serializer(mode="wrap")
    def _without_unknown_server(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`server` only where known, so the lines of every other run stay as they were."""
        data: dict[str, Any] = handler(self)
        if data.get("server") is None:
            data.pop("server", None)
        return data


class ConfigLine(BaseModel):
    """One configuration of a results file: written before the first record made with it by each run, so every
    fingerprint a record names is described in the same file (`cat` of two files stays self-describing)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["config"] = "config"
    fingerprint: str
    config: dict[str, Any] = Field(description="the settings that shaped the generation "
                                   "(userturn.core.fingerprint.generation_config); `fingerprint` is their hash")
    renderer: RendererInfo | None = None
    run: RunInfo | None = None


def key_field(text: str) -> str:
    """One text field of a key: `%` and `|` percent-encoded, everything else kept as is (readable)."""
    return text.translate(_KEY_ESCAPES)


def record_key(
    model: str,
    dataset: str,
    item_id: str,
    perturbation: str,
    temperature: float,
    sample: int,
    mode: str = "raw",
) -> str:
    """Stable, human-readable, unambiguous identity of one sample; resume matches on it.

    `model|dataset|item_id|mode|perturbation|t=T|s=K`: text fields have `%` and `|` percent-encoded (so no two
    samples share a key), `T` is `repr` of `temperature_value(temperature)` (the same temperature, the same text:
    0.1 + 0.2 and 0.3 give `t=0.3`; 1 and 1.0 give `t=1.0`).
    """
    return key_prefix(model, dataset, item_id, perturbation, mode) + condition_suffix(temperature, sample)


def key_prefix(model: str, dataset: str, item_id: str, perturbation: str, mode: str = "raw") -> str:
    """The part of `record_key` shared by every sample of one item and perturbation (ends with the separator)."""
    return KEY_SEPARATOR.join([*map(key_field, (model, dataset, item_id, mode, perturbation)), ""])


def key_prefixes(model: str, dataset: str, perturbation: str, mode: str = "raw") -> Callable[[str], str]:
    """`key_prefix` for the items of one run and perturbation: the run's fields are escaped once, not per item."""
    head = KEY_SEPARATOR.join([key_field(model), key_field(dataset), ""])
    tail = KEY_SEPARATOR.join(["", key_field(mode), key_field(perturbation), ""])

    def prefix(item_id: str) -> str:
        return head + item_id.translate(_KEY_ESCAPES) + tail

    return prefix


def temperature_value(temperature: float) -> float:
    """The one rule for when two temperatures are the same: equal at 6 significant digits (`f"{t:g}"`, the rule the
    per-sample seeds have always used, so no seed moves). Options, keys, seeds and the report's filters all compare
    temperatures through it: 0.1 + 0.2 is 0.3; 0.7 and 0.7000001 are one temperature, 0.7 and 0.70001 two."""
    return float(f"{float(temperature):g}")


def condition_suffix(temperature: float, sample: int) -> str:
    """The part of `record_key` after `key_prefix`: `t=T|s=K`."""
    return f"t={temperature_value(temperature)!r}{KEY_SEPARATOR}s={int(sample)}"


def check_key_format(schema_version: int, path: object, key: str) -> None:
    """UserError when a results file holds a record whose key is in the pre-2 format (resume cannot match it)."""
    if schema_version < KEY_FORMAT_SINCE:
        raise UserError(
            f"{path}: record {key!r} has schema_version {schema_version}: its key is in the old format (fields "
            f"joined unescaped, temperature rounded), so resuming would probe its samples again; write to a new "
            f"--out file (this one still works with judge, report and export)")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
