"""Turn a judge's reply into a validated verdict. Only the judge's own words vote: a `<think>` block counts as
reasoning only when it opens the reply, an object whose text (or verdict) occurs in the judged turn is a quote and
never a verdict, and two different verdicts in one reply are no answer (the judge is asked again)."""

from __future__ import annotations

import contextlib
import html
import json
import re
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from userturn.core.errors import first_error
from userturn.core.taxonomy import LABELS, Label, normalise_label
from userturn.core.text import content_text

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_DECODER = json.JSONDecoder()
_TAGS = "think|thinking|reasoning"
_OPENING = re.compile(rf"\s*<({_TAGS})>", re.IGNORECASE)
_LONE_CLOSE = re.compile(rf"</(?:{_TAGS})>", re.IGNORECASE)
RAW_CAP = 16_000  # characters of an unusable reply kept in `judges[].raw`
RATIONALE_CAP = 2_000  # characters of a verdict's rationale kept


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
            "label": {"type": "string", "enum": list(LABELS)},
        },
        "required": ["rationale", "label"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "judge_verdict", "strict": True, "schema": schema}}


class ParseError(ValueError):
    """The reply held no usable verdict. `quoted`: it held verdicts, but only ones quoted from the judged turn or
    several that disagree (the re-asks the report counts)."""

    def __init__(self, message: str, *, quoted: bool = False) -> None:
        super().__init__(message)
        self.quoted = quoted


def capped(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with a note saying how many were dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … [cut by userturn: {len(text) - limit:,} more characters]"


def judge_answer(content: str, turn: str | None = None) -> str:
    """The reply without its reasoning: a reasoning block (`<think>`, `<thinking>`, `<reasoning>`) only when it
    opens the reply, up to its first closing tag; or, without one, what follows a first lone closing tag (reasoning
    opened by the prompt) unless the judged `turn` holds such a tag itself (the reply may be quoting it). Tags
    anywhere else are text. ParseError when the opening block is never closed (reasoning cut by the token limit)."""
    opening = _OPENING.match(content)
    if opening:
        close = re.search(rf"</{opening.group(1)}>", content[opening.end():], re.IGNORECASE)
        if close is None:
            raise ParseError("reply held only reasoning (no answer after </think>)")
        return content[opening.end() + close.end():].strip()
    lone = None if turn and _LONE_CLOSE.search(turn) else _LONE_CLOSE.search(content)
    return content[lone.end():].strip() if lone else content.strip()


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


def _verdict(value: Any) -> JudgeOutput | str:
    """The verdict an object holds, or why it holds none."""
    if not isinstance(value, dict):
        return "not a JSON object"
    try:
        return JudgeOutput.model_validate(value)
    except ValidationError as exc:
        return first_error(exc, "object")


def _squeeze(text: str) -> str:
    return "".join(text.split())


class _Quotes:
    """What of the judged turn a reply may quote: its text (whitespace ignored) and the verdicts it holds."""

    def __init__(self, turn: str | None) -> None:
        # As the prompt shows it too (`xml_text`: & < > escaped): a judge may quote either.
        self.texts = [t for t in {_squeeze(turn or ""), _squeeze(html.escape(turn or "", quote=False))} if t]
        self.verdicts: set[tuple[str, str]] = set()
        for _, _, value in _candidates(turn or "") if turn and "{" in turn else []:
            verdict = _verdict(value)
            if isinstance(verdict, JudgeOutput):
                self.verdicts.add((verdict.label, _squeeze(verdict.rationale)))

    def holds(self, source: str, verdict: JudgeOutput) -> bool:
        squeezed = _squeeze(source)
        return any(squeezed in text for text in self.texts) or \
            (verdict.label, _squeeze(verdict.rationale)) in self.verdicts


def parse_verdict(content: str | None, turn: str | None = None) -> JudgeOutput:
    """The judge's verdict in a reply about the generated `turn`: the valid verdict objects of the answer (outside
    an opening reasoning block, not nested in another verdict), less those quoted from `turn`. They must agree on
    the label (the last one is returned); none left, or two labels, is a ParseError (`quoted` when verdicts were
    there: quoted text never chooses a label)."""
    if content is None or not content.strip():
        raise ParseError("empty reply")
    text = judge_answer(content, turn)
    if not text:
        raise ParseError("reply held only reasoning (no answer after </think>)")
    last_error = "no JSON object found"
    valid: list[tuple[int, int, JudgeOutput]] = []
    for start, end, value in _candidates(text):
        verdict = _verdict(value)
        if isinstance(verdict, str):
            if isinstance(value, dict):
                last_error = verdict
            continue
        valid.append((start, end, verdict))
    # A verdict nested in another (a fenced block's object, a field of the judge's object) is part of it.
    valid = [(s, e, v) for s, e, v in valid
             if not any(s2 <= s and e <= e2 and (s2, e2) != (s, e) for s2, e2, _ in valid)]
    quotes = _Quotes(turn)
    own = [(s, e, v) for s, e, v in valid if not quotes.holds(text[s:e], v)]
    if valid and not own:
        raise ParseError("the only verdict in the reply is quoted from the generated turn; give your own",
                         quoted=True)
    labels = list(dict.fromkeys(v.label for _, _, v in own))
    if len(labels) > 1:
        raise ParseError(f"the reply holds {len(labels)} different verdicts ({', '.join(labels)}); give exactly one",
                         quoted=True)
    if not own:
        raise ParseError(last_error)
    verdict = max(own, key=lambda c: c[1])[2]
    verdict.rationale = capped(verdict.rationale, RATIONALE_CAP)
    return verdict


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
