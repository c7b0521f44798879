"""Turn a judge's reply into a validated verdict: strip reasoning, find the judge's final JSON object, validate it."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from userturn.core.errors import first_error
from userturn.core.taxonomy import Label, normalise_label
from userturn.core.text import content_text, strip_reasoning

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_DECODER = json.JSONDecoder()


class JudgeOutput(BaseModel):
    """The structured output asked of a judge (rationale first, so the label follows the reasoning)."""

    rationale: str = Field(default="", description="one short sentence")
    label: Label

    @field_validator("label", mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        return normalise_label(value) or value

    @field_validator("rationale", mode="before")
    @classmethod
    def _rationale_to_str(cls, value: Any) -> Any:
        return "" if value is None else str(value)


def response_schema() -> dict[str, Any]:
    """`response_format` for OpenAI-compatible structured output (strict JSON schema)."""
    schema = {
        "type": "object",
        "properties": {
            "rationale": {"type": "string"},
            "label": {"type": "string", "enum": list(Label.__args__)},  # type: ignore[attr-defined]
        },
        "required": ["rationale", "label"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "judge_verdict", "strict": True, "schema": schema}}


class ParseError(ValueError):
    """The reply held no valid verdict object."""


def _candidates(text: str) -> list[tuple[int, int, Any]]:
    """(start, end, value) of the JSON values in the text: fenced blocks, and every object starting at a '{'."""
    found: list[tuple[int, int, Any]] = []
    for match in _FENCE.finditer(text):
        with contextlib.suppress(ValueError):
            found.append((match.start(), match.end(), json.loads(match.group(1))))
    for match in re.finditer(r"\{", text):
        try:
            value, end = _DECODER.raw_decode(text, match.start())
        except ValueError:
            continue
        found.append((match.start(), end, value))
    return found


def parse_verdict(content: str | None) -> JudgeOutput:
    """The judge's final verdict: the reply as a whole when it is one valid object, else the valid object that
    ends last (an outer object before the objects nested in it). A verdict quoted earlier in the reply, e.g. the
    judge echoing a generated turn that contains one, never wins over the verdict the judge gives after it.
    Raises ParseError when no object validates as `JudgeOutput`."""
    if content is None or not content.strip():
        raise ParseError("empty reply")
    text = strip_reasoning(content)
    if not text:
        raise ParseError("reply held only reasoning (no answer after </think>)")
    last_error = "no JSON object found"
    # Latest end first (the reply as a whole when it is one object); for the same end, the outermost first.
    for _, _, value in sorted(_candidates(text), key=lambda c: (-c[1], c[0])):
        if not isinstance(value, dict):
            continue
        try:
            return JudgeOutput.model_validate(value)
        except ValidationError as exc:
            last_error = first_error(exc, "object")
    raise ParseError(last_error)


def message_text(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """(content, finish_reason) of the first choice of a chat completion; content parts are joined."""
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None, None
    message = choice.get("message") or {}
    raw = message.get("content")
    try:
        content = None if raw is None else content_text(raw)
    except TypeError:  # not text: no usable reply
        content = None
    return content, choice.get("finish_reason")
