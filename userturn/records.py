"""The one record schema: every generated user turn is one JSON line of `ProbeRecord`.

The writer, the resume reader, the judge and the report all use these models.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

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
    perturbation_detail: dict[str, Any] | None = Field(default=None, description="what the perturbation changed "
                                                       "(client.perturb.Perturbed.detail); None for `none`")
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


def key_prefixes(model: str, dataset: str, perturbation: str, mode: str = "raw") -> Callable[[str], str]:
    """`key_prefix` for the items of one run and perturbation: the run's fields are escaped once, not per item."""
    head = KEY_SEPARATOR.join([key_field(model), key_field(dataset), ""])
    tail = KEY_SEPARATOR.join(["", key_field(mode), key_field(perturbation), ""])
    escapes = _KEY_ESCAPES

    def prefix(item_id: str) -> str:
        return head + item_id.translate(escapes) + tail

    return prefix


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


_CONFIG_FIELD: TypeAdapter[dict[str, Any] | None] = TypeAdapter(dict[str, Any] | None)  # ProbeRecord.config's type
_NOT_GIVEN: Any = object()


def config_json(config: dict[str, Any] | None) -> Any:
    """`config` validated and in JSON form, exactly as `ProbeRecord`'s serialiser writes its `config` field.

    Computed once per configuration and handed to `shared_json`: dumping a dict of arbitrary values inspects each
    value, which was two thirds of `shared_json`'s cost per item.
    """
    return _CONFIG_FIELD.dump_python(_CONFIG_FIELD.validate_python(config), mode="json")


def shared_json(shared: dict[str, Any], config: Any = _NOT_GIVEN) -> dict[str, Any]:
    """The JSON form of the fields every sample of one (item, perturbation) shares, in `ProbeRecord` field order.

    Built by validating and dumping one placeholder `ProbeRecord`, so the schema and its serialiser decide every
    shared value; `ok_record_line` then only fills in the per-sample fields. `config`: `config_json(shared["config"])`
    when the caller has it (then the placeholder carries no config, and the given JSON takes its place).
    """
    if config is _NOT_GIVEN:
        return ProbeRecord(**shared, key="", temperature=0.0, sample=0, seed=0, status="ok").model_dump(mode="json")
    placeholder = ProbeRecord(**{**shared, "config": None}, key="", temperature=0.0, sample=0, seed=0, status="ok")
    dumped = placeholder.model_dump(mode="json")
    dumped["config"] = config  # the key keeps its place: the line's field order is the model's
    return dumped


# The per-sample fields of an ok record, in `ProbeRecord` field order: the holes of an `OkLineTemplate`.
SAMPLE_FIELDS = ("key", "temperature", "sample", "seed", "user_turn", "finish_reason", "matched_stop", "usage",
                 "latency_s", "attempts")
_HOLE_MARK = "ut-hole-" + secrets.token_hex(16) + "-"  # random per process: no content holds it
_HOLE = re.compile(b'"' + _HOLE_MARK.encode() + rb'(\d+)"')
OkLineTemplate = tuple[bytes, ...]  # len(SAMPLE_FIELDS) + 1 byte strings: the line around its holes


def _split_at_holes(base: dict[str, Any], holes: tuple[str, ...]) -> tuple[list[bytes], list[int]]:
    """An ok record's JSON line (from `shared_json`'s output) cut at the fields `holes` names: the bytes around them,
    and the position in `holes` of each field in line order. The per-sample fields must come in `SAMPLE_FIELDS`
    order, as the schema lays them out."""
    record = base.copy()
    for index, name in enumerate(holes):
        record[name] = f"{_HOLE_MARK}{index}"
    record["status"], record["error"] = "ok", None
    parts = _HOLE.split(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
    order = [int(hole) for hole in parts[1::2]]
    samples = [holes[i] for i in order if holes[i] in SAMPLE_FIELDS]
    if sorted(order) != list(range(len(holes))) or samples != list(SAMPLE_FIELDS):  # pragma: no cover
        raise AssertionError("record template: hole marks out of place")  # the mark is random; the schema's order
    return parts[0::2], order


def ok_line_template(base: dict[str, Any]) -> OkLineTemplate:
    """An ok record's JSON line around its per-sample fields, from `shared_json`'s output (picklable bytes: what the
    probe's preparing process hands back per item)."""
    return tuple(_split_at_holes(base, SAMPLE_FIELDS)[0])


# The shared fields that differ between the items of one run and perturbation; the others (model, dataset, mode,
# perturbation, template, config and its fingerprint) are the same for all of them.
ITEM_FIELDS = ("item_id", "messages", "assistant_source", "prompt_sha256", "reference_answer", "correct",
               "task_scores", "perturbation_detail", "meta", "special_tokens_in_content")
# ProbeRecord's own field definitions for them: validating and dumping this small model gives each field the JSON
# form the whole record's serialiser gives it.
_ItemFields = create_model(  # type: ignore[call-overload]
    "_ItemFields", __config__=ConfigDict(extra="forbid"),
    **{name: (ProbeRecord.model_fields[name].annotation, ProbeRecord.model_fields[name]) for name in ITEM_FIELDS})
_DUMMY_ITEM: dict[str, Any] = {"item_id": "-"}


class OkLineMaker:
    """`ok_line_template`s for the items of one run and perturbation, without a whole record per item.

    The record's line is laid out once, with holes for the item fields (`ITEM_FIELDS`) and the per-sample fields;
    an item then costs validating and dumping its own fields (ProbeRecord's definitions of them) and a join. Byte
    for byte what `ok_line_template(shared_json({**run_fields, **item_fields}, config))` gives (tested).
    """

    def __init__(self, run_fields: dict[str, Any], config: Any = _NOT_GIVEN) -> None:
        shared = {**run_fields, **_DUMMY_ITEM}
        base = shared_json(shared) if config is _NOT_GIVEN else shared_json(shared, config)
        parts, order = _split_at_holes(base, (*ITEM_FIELDS, *SAMPLE_FIELDS))
        # The template's parts: constant ones as they are, the ones holding item fields as a %-format (constants
        # with `%b` where a field's JSON goes) and the fields' names, in order.
        self._parts: list[bytes] = []
        self._formats: list[tuple[int, bytes, tuple[str, ...]]] = []
        constants = [parts[0]]
        names: list[str] = []

        def close_part() -> None:
            if names:
                self._formats.append((len(self._parts), b"%b".join(c.replace(b"%", b"%%") for c in constants),
                                      tuple(names)))
            self._parts.append(b"".join(constants))

        for index, constant in zip(order, parts[1:], strict=True):
            if index < len(ITEM_FIELDS):
                names.append(ITEM_FIELDS[index])
            else:
                close_part()
                constants, names = [], []
            constants.append(constant)
        close_part()

    def template(self, item_fields: dict[str, Any]) -> OkLineTemplate:
        """The item's ok-line template (`ok_record_line` fills in the samples)."""
        values = _ItemFields.model_validate(item_fields).model_dump(mode="json")
        dumps = orjson.dumps
        parts = self._parts.copy()
        for index, form, names in self._formats:
            parts[index] = form % tuple([dumps(values[name]) for name in names])
        return tuple(parts)


def template_fields(template: OkLineTemplate) -> dict[str, Any]:
    """The shared fields of a template, in JSON form (what `ProbeRecord(**fields, key=..., ...)` takes): for the
    records that are not ok lines (errors, odd server values, judged records)."""
    filler = (b'""', b"0.0", b"0", b"0", b"null", b"null", b"null", b"null", b"null", b"0")
    fields: dict[str, Any] = orjson.loads(b"".join(part for pair in zip(template, (*filler, b""), strict=True)
                                                   for part in pair))
    for name in (*SAMPLE_FIELDS, "status", "error"):
        del fields[name]
    return fields


def ok_record_line(
    template: OkLineTemplate,
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

    `template` comes from `ok_line_template(shared_json(...))`. Returns None when a server-supplied value is not
    already of the schema's type (e.g. a numeric `finish_reason`, a string token count): the caller then builds a
    `ProbeRecord`, whose validation decides. ~20x cheaper than validating and dumping a model per sample.
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
    dumps = orjson.dumps
    t = template
    return b"".join((t[0], dumps(key), t[1], dumps(float(temperature)), t[2], b"%d" % sample, t[3], b"%d" % seed,
                     t[4], dumps(user_turn), t[5], dumps(finish_reason), t[6], dumps(matched_stop), t[7],
                     dumps(usage), t[8], dumps(latency_s), t[9], b"%d" % attempts, t[10]))
