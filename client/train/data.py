"""Training rows (what `userturn export` writes: SFT `messages`, DPO `prompt`/`chosen`/`rejected`) -> token ids.

An example's prompt is the probe prompt (`PromptRenderer.user_turn_prompt`), tokenized as the server does (with
the tokenizer's BOS); its target, the only tokens with loss, is the user turn followed by the end-of-turn marker
the template writes after it (`<|im_end|>` for ChatML). Rows of an evaluation set are refused (`overlapping_row`).
Pure: no torch, no transformers (the encoder is passed in).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from userturn.client.data.dataset import MAX_LINE_BYTES, ItemId
from userturn.client.render.templates import PromptRenderer, template_messages
from userturn.core.errors import UserError, first_error
from userturn.core.files import file_sha256, jsonl_objects
from userturn.core.records import Message

Method = Literal["sft", "dpo"]


class Encoder(Protocol):
    """Text -> token ids, as the serving tokenizer does (`add_special_tokens`: its BOS etc.)."""

    def __call__(self, text: str, *, add_special_tokens: bool) -> list[int]: ...


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: ItemId | None = None


class SftRow(_Row):
    """A conversation whose last message is the user turn to learn."""

    messages: list[Message] = Field(min_length=2)

    @field_validator("messages")
    @classmethod
    def _ends_with_user(cls, value: list[Message]) -> list[Message]:
        if value[-1].role != "user":
            raise ValueError(f"the last message must be the user turn to learn (got role {value[-1].role!r})")
        if not value[-1].content.strip():
            raise ValueError("the final user turn is empty")
        return value


class PreferenceRow(_Row):
    """A conversation and two candidate next user turns: chosen (genuine) and rejected (degenerate)."""

    prompt: list[Message] = Field(min_length=1)
    chosen: list[Message] = Field(min_length=1, max_length=1)
    rejected: list[Message] = Field(min_length=1, max_length=1)

    @field_validator("chosen", "rejected")
    @classmethod
    def _one_user_turn(cls, value: list[Message]) -> list[Message]:
        if value[0].role != "user":
            raise ValueError(f"must be one user message (got role {value[0].role!r})")
        return value


Row = SftRow | PreferenceRow


@dataclass
class DataFile:
    """The rows of one training file, with where each came from."""

    path: Path
    sha256: str
    rows: list[Row]
    lines: list[int]  # 1-based line number of each row

    def where(self, index: int) -> str:
        return f"{self.path}:{self.lines[index]}"


def read_rows(path: str | Path, method: Method) -> DataFile:
    """Parse a training JSONL file; any bad line is a one-line UserError naming `file:line`."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"training data not found: {p}")
    model: type[Row] = SftRow if method == "sft" else PreferenceRow
    rows: list[Row] = []
    lines: list[int] = []
    for number, data in jsonl_objects(p, max_line_bytes=MAX_LINE_BYTES):
        if method == "sft" and "messages" not in data and "chosen" in data:
            raise UserError(f"{p}:{number}: a preference row (prompt/chosen/rejected): train it with --method dpo")
        if method == "dpo" and "chosen" not in data and "messages" in data:
            raise UserError(f"{p}:{number}: an SFT row (messages): train it with --method sft")
        try:
            rows.append(model.model_validate(data))
        except ValidationError as exc:
            raise UserError(f"{p}:{number}: {first_error(exc)}") from None
        lines.append(number)
    if not rows:
        raise UserError(f"{p}: no training rows")
    return DataFile(path=p, sha256=file_sha256(p), rows=rows, lines=lines)


def _first_user_text(messages: Sequence[Message]) -> str | None:
    return next((" ".join(m.content.split()) for m in messages if m.role == "user"), None)


def _context(row: Row) -> list[Message]:
    return row.messages[:-1] if isinstance(row, SftRow) else row.prompt


@dataclass
class EvalSet:
    """The items of one evaluation set: their ids and first user messages (whitespace-normalised)."""

    name: str
    ids: set[str] = field(default_factory=set)
    first_user: dict[str, str] = field(default_factory=dict)  # text -> item id

    @classmethod
    def from_items(cls, name: str, items: Iterable[Any]) -> EvalSet:
        """From dataset items (anything with `.id` and `.messages`)."""
        out = cls(name=name)
        for item in items:
            out.ids.add(str(item.id))
            text = _first_user_text(item.messages)
            if text:
                out.first_user.setdefault(text, str(item.id))
        return out


def overlapping_row(data: DataFile, eval_sets: Sequence[EvalSet]) -> str | None:
    """A one-line reason naming the first row that belongs to an evaluation set (by its `id`, or by the same first
    user message: rows without ids, or ids renamed, are caught too), or None."""
    for index, row in enumerate(data.rows):
        text = _first_user_text(_context(row))
        for es in eval_sets:
            if row.id is not None and row.id in es.ids:
                return (f"{data.where(index)}: item {row.id} is in the evaluation set {es.name} "
                        "(held-out items are never trained on)")
            if text is not None and text in es.first_user:
                return (f"{data.where(index)}: its conversation is item {es.first_user[text]} of the evaluation set "
                        f"{es.name} (same first user message; held-out items are never trained on)")
    return None


class SftExample(BaseModel):
    """Token ids of prompt + user turn, and the loss mask (1 on the user turn and its end-of-turn marker)."""

    input_ids: list[int]
    completion_mask: list[int]


class DpoExample(BaseModel):
    """Token ids of the shared prompt and of the two candidate user turns (each with its end-of-turn marker)."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]


@dataclass
class RenderStats:
    """What rendering kept: examples, and how many were cut on the left (prompt) or dropped (target too long)."""

    rows: int = 0
    truncated: int = 0
    dropped: int = 0
    prompt_tokens: list[int] = field(default_factory=list)  # per example kept
    target_tokens: list[int] = field(default_factory=list)

    @property
    def examples(self) -> int:
        return len(self.prompt_tokens)

    def as_dict(self) -> dict[str, Any]:
        def mean(xs: list[int]) -> float | None:
            return round(sum(xs) / len(xs), 1) if xs else None

        return {"rows": self.rows, "examples": self.examples, "truncated": self.truncated, "dropped": self.dropped,
                "mean_prompt_tokens": mean(self.prompt_tokens), "mean_target_tokens": mean(self.target_tokens),
                "max_tokens": max((p + t for p, t in zip(self.prompt_tokens, self.target_tokens, strict=True)),
                                  default=None)}


def user_turn_texts(renderer: PromptRenderer, context: Sequence[Message], turn: str) -> tuple[str, str]:
    """(prompt, target): the probe prompt for `context`, and `turn` followed by the template's end-of-turn marker
    (context + turn must render as the prompt, the turn's text, then one of the renderer's stops; else UserError)."""
    prompt = renderer.user_turn_prompt(context)
    full = renderer.without_prefix(renderer.backend.render(
        template_messages([*context, Message(role="user", content=turn)]), add_generation_prompt=False))
    if not full.startswith(prompt):
        raise UserError(f"chat template of {renderer.name}: the conversation with its final user turn does not "
                        "start with the probe prompt; cannot place the user turn")
    after = full[len(prompt):]
    text = turn if after.startswith(turn) else turn.strip()
    if not after.startswith(text):
        raise UserError(f"chat template of {renderer.name} rewrites the user turn ({after[:40]!r}); cannot mask it")
    rest = after[len(text):]
    for stop in sorted(renderer.stop, key=len, reverse=True):
        if stop and rest.startswith(stop):
            return prompt, text + stop
    raise UserError(f"chat template of {renderer.name} writes {rest[:20]!r} after a user turn, which starts with "
                    f"none of its stops {renderer.stop}; cannot end the target")


def _fit(prompt_ids: list[int], target_len: int, max_length: int, stats: RenderStats) -> list[int] | None:
    """The prompt cut on the left so prompt + target fits `max_length` (counted in `stats`); None when the target
    alone does not."""
    if target_len >= max_length:
        stats.dropped += 1
        return None
    room = max_length - target_len
    if len(prompt_ids) > room:
        stats.truncated += 1
        prompt_ids = prompt_ids[-room:]
    stats.prompt_tokens.append(len(prompt_ids))
    stats.target_tokens.append(target_len)
    return prompt_ids


def sft_examples(rows: Sequence[SftRow], renderer: PromptRenderer, encode: Encoder, max_length: int,
                 ) -> tuple[list[SftExample], RenderStats]:
    """One example per row: the loss covers exactly the final user turn and its end-of-turn marker."""
    stats = RenderStats(rows=len(rows))
    out = []
    for row in rows:
        prompt, target = user_turn_texts(renderer, row.messages[:-1], row.messages[-1].content)
        target_ids = encode(target, add_special_tokens=False)
        prompt_ids = _fit(encode(prompt, add_special_tokens=True), len(target_ids), max_length, stats)
        if prompt_ids is not None:
            out.append(SftExample(input_ids=prompt_ids + target_ids,
                                  completion_mask=[0] * len(prompt_ids) + [1] * len(target_ids)))
    return out, stats


def dpo_examples(rows: Sequence[PreferenceRow], renderer: PromptRenderer, encode: Encoder, max_length: int,
                 ) -> tuple[list[DpoExample], RenderStats]:
    """One example per row: the shared probe prompt, the chosen and the rejected user turn (each with its marker)."""
    stats = RenderStats(rows=len(rows))
    out = []
    for row in rows:
        prompt, chosen = user_turn_texts(renderer, row.prompt, row.chosen[0].content)
        _, rejected = user_turn_texts(renderer, row.prompt, row.rejected[0].content)
        chosen_ids = encode(chosen, add_special_tokens=False)
        rejected_ids = encode(rejected, add_special_tokens=False)
        longest = max(len(chosen_ids), len(rejected_ids))
        prompt_ids = _fit(encode(prompt, add_special_tokens=True), longest, max_length, stats)
        if prompt_ids is not None:
            out.append(DpoExample(prompt_ids=prompt_ids, chosen_ids=chosen_ids, rejected_ids=rejected_ids))
    return out, stats
