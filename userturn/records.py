"""The one record schema: every generated user turn is one JSON line of `ProbeRecord`.

The writer, the resume reader, the judge and the report all use these models.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from userturn.errors import UserError
from userturn.taxonomy import Label

SCHEMA_VERSION = 2
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
    latency_s: float | None = None


class ProbeRecord(BaseModel):
    """One generated user turn for one (model, dataset, item, mode, perturbation, temperature, sample)."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    key: str
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
    config_fingerprint: str | None = Field(default=None, description="16 hex digits: sha256 of `config` as "
                                           "canonical JSON (client.fingerprint); None in files from before it")
    config: dict[str, Any] | None = Field(default=None, description="the settings that shaped the generation "
                                "(client.fingerprint.GenerationConfig)")
    # What came back.
    user_turn: str | None = None
    finish_reason: str | None = None
    matched_stop: str | int | None = None
    status: Literal["ok", "error"]
    error: str | None = None
    usage: Usage | None = None
    latency_s: float | None = None
    attempts: int = 0
    # Task accuracy of the assistant turn in `messages`, after perturbation (None: no reference, no scorer, or no
    # assistant turn, as with `remove`).
    reference_answer: str | None = None
    correct: bool | None = None
    task_scores: dict[str, float] | None = None
    # Judging (filled by judges/).
    label: Label | None = None
    label_source: Literal["rule", "judge", "majority"] | None = None
    judge_status: Literal["ok", "error"] | None = None
    judge_panel: str | None = Field(default=None, description="id of the judge panel that judged the record "
                                    "(judges.panel.panel_id: its judge models in order and its prompt sha256)")
    judges: list[JudgeVerdict] = Field(default_factory=list)
    meta: dict[str, Any] | None = None
    special_tokens_in_content: bool | None = Field(
        default=None, description="true: the probed messages contain the tokenizer's special tokens (allowed with "
        "--allow-special-tokens); false: checked, none; null: not checked (no tokenizer, or an older record)")


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
    samples share a key), `T` is `repr(float(temperature))` (the shortest text that reads back as the same float:
    0.7 and 0.7000001 differ; 1 and 1.0 are the same float, `t=1.0`).
    """
    return key_prefix(model, dataset, item_id, perturbation, mode) + condition_suffix(temperature, sample)


def key_prefix(model: str, dataset: str, item_id: str, perturbation: str, mode: str = "raw") -> str:
    """The part of `record_key` shared by every sample of one item and perturbation (ends with the separator)."""
    return KEY_SEPARATOR.join([*map(key_field, (model, dataset, item_id, mode, perturbation)), ""])


def condition_suffix(temperature: float, sample: int) -> str:
    """The part of `record_key` after `key_prefix`: `t=T|s=K`."""
    return f"t={float(temperature)!r}{KEY_SEPARATOR}s={int(sample)}"


def check_key_format(schema_version: int, path: object, key: str) -> None:
    """UserError when a results file holds a record whose key is in the pre-2 format (resume cannot match it)."""
    if schema_version < KEY_FORMAT_SINCE:
        raise UserError(
            f"{path}: record {key!r} has schema_version {schema_version}: its key is in the old format (fields "
            f"joined unescaped, temperature rounded), so resuming would probe its samples again; write to a new "
            f"--out file (this one still works with judge, report and export)")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# Fast lines for ok records (the probe's hot path)

_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


def shared_json(shared: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of the fields every sample of one (item, perturbation) shares, in `ProbeRecord` field order.

    Built by validating and dumping one placeholder `ProbeRecord`, so the schema and its serialiser decide every
    shared value; `ok_record_line` then only fills in the per-sample fields.
    """
    placeholder = ProbeRecord(**shared, key="", temperature=0.0, sample=0, seed=0, status="ok")
    return placeholder.model_dump(mode="json")


def ok_record_line(
    base: dict[str, Any],
    *,
    key: str,
    temperature: float,
    sample: int,
    seed: int,
    user_turn: str,
    finish_reason: object,
    matched_stop: object,
    usage: object,
    latency_s: float,
    attempts: int,
) -> bytes | None:
    """One ok record as a JSON line, byte-identical to `ProbeRecord(...).model_dump_json()` + newline.

    `base` comes from `shared_json`. Returns None when a server-supplied value is not already of the schema's
    type (e.g. a numeric `finish_reason`, a string token count): the caller then builds a `ProbeRecord`, whose
    validation decides. ~10x cheaper than validating and dumping a model per sample.
    """
    if finish_reason is not None and type(finish_reason) is not str:
        return None
    if matched_stop is not None and type(matched_stop) is not str and type(matched_stop) is not int:
        return None
    if usage is not None:
        if type(usage) is not dict:
            return None
        counts = {name: usage.get(name) for name in _USAGE_FIELDS}
        for value in counts.values():
            if value is not None and type(value) is not int:
                return None
        usage = counts
    record = base.copy()  # keeps ProbeRecord's field order; the updates below replace values in place
    record["key"] = key
    record["temperature"] = float(temperature)
    record["sample"] = sample
    record["seed"] = seed
    record["user_turn"] = user_turn
    record["finish_reason"] = finish_reason
    record["matched_stop"] = matched_stop
    record["usage"] = usage
    record["latency_s"] = latency_s
    record["attempts"] = attempts
    return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
