"""Dataset items: `{"id", "messages", "answer"?, "meta"?}`, read from local JSONL with file:line errors.

Hostile or broken lines are refused before any request, each with one line naming `file:line`: invalid JSON or
UTF-8 (lone surrogates included), a line over `MAX_LINE_BYTES`, nesting deeper than `MAX_DEPTH`, a key given twice
in one object, and fields of the wrong type (see the README's *Hostile input* section).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, BeforeValidator, Field, ValidationError, field_validator

from userturn.client.render.jinja_env import REASONING_FIELDS
from userturn.core.errors import UserError, first_error
from userturn.core.files import json_error
from userturn.core.records import Message

MAX_LINE_BYTES = 16 << 20  # 16 MiB: ~4M tokens of text, far beyond any context window
MAX_DEPTH = 32  # objects/arrays nested in one line; a conversation with tool calls needs ~6
MAX_ID_CHARS = 1024
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _id_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("id must be a string or an integer, not a boolean")
    return str(value) if isinstance(value, int) else value


ItemId = Annotated[str, Field(min_length=1), BeforeValidator(_id_to_str)]  # an integer id is read as its digits


class DatasetItem(BaseModel):
    """One conversation to probe. Ends with an assistant turn, or is answered by the model first."""

    id: ItemId = Field(max_length=MAX_ID_CHARS)
    messages: list[Message] = Field(min_length=1)
    answer: str | None = None
    meta: dict[str, Any] | None = None
    # Where the item was read: a plain slot (a pydantic private attribute costs ~3 us per validation).
    __slots__ = ("__weakref__", "_read_at")

    @field_validator("id")
    @classmethod
    def _id_is_printable(cls, value: str) -> str:
        if _CONTROL_CHARS.search(value):
            raise ValueError("id must not contain control characters (newline, tab, NUL, ...)")
        return value

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_to_str(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("answer must be a string or a number, not a boolean")
        return str(value) if isinstance(value, int | float) else value

    @field_validator("messages")
    @classmethod
    def _known_extras_have_their_types(cls, messages: list[Message]) -> list[Message]:
        for index, message in enumerate(messages):
            extra = message.__pydantic_extra__
            if not extra:
                continue
            for name in REASONING_FIELDS:
                if extra.get(name) is not None and not isinstance(extra[name], str):
                    raise ValueError(f"message {index}: {name} must be a string")
            calls = extra.get("tool_calls")
            if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
                raise ValueError(f"message {index}: tool_calls must be a list of objects")
        return messages

    @property
    def ends_with_assistant(self) -> bool:
        return self.messages[-1].role == "assistant"

    @property
    def where(self) -> str | None:
        """Where the item was read (`data.jsonl:12`, `gsm8k (openai/gsm8k) row 41`), for error messages."""
        return getattr(self, "_read_at", None)

    def located(self, where: str) -> DatasetItem:
        """This item, remembering where it was read."""
        object.__setattr__(self, "_read_at", where)
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> DatasetItem:
        """A copy that remembers where the original was read."""
        copy = super().model_copy(update=update, deep=deep)
        where = self.where
        return copy if where is None else copy.located(where)


def shape(value: Any, limit: int) -> tuple[int, int]:
    """(nesting depth of objects/arrays (a flat object: 1), number of object keys), without recursion; stops past
    `limit`."""
    deepest, keys, stack = 0, 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if depth > limit:
                break
        if type(node) is dict:  # parsed JSON: exact dict/list types
            keys += len(node)
            node = node.values()
        for child in node:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return deepest, keys


_KEY_END = re.compile(rb'"\s*:')  # every key ends so (strings may too, so this count is never below the true one)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"key {twice!r} appears twice in one object")
    return obj


_STRICT_KEYS = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys)


def parse_line(raw: bytes) -> dict[str, Any]:
    """One dataset line as a JSON object; ValueError saying what is wrong with it."""
    try:
        obj = orjson.loads(raw)  # strict: valid UTF-8 only, no lone surrogates, no NaN, depth <= 1024
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({json_error(exc)})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    depth, keys = shape(obj, MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep (objects/arrays within each other)")
    if len(_KEY_END.findall(raw)) > keys:  # orjson keeps the last of repeated keys silently: look closer
        _STRICT_KEYS.decode(raw.decode("utf-8"))
    return obj


def parse_item_line(path: Path, number: int, raw: bytes) -> DatasetItem:
    """One non-blank dataset line -> DatasetItem; anything wrong is a UserError naming `file:line`."""
    try:
        obj = parse_line(raw)
    except ValueError as exc:
        raise UserError(f"{path}:{number}: {exc}") from None
    try:
        return DatasetItem.model_validate(obj)
    except ValidationError as exc:
        raise UserError(f"{path}:{number}: {first_error(exc, 'item')}") from None


def load_jsonl(path: str | Path, limit: int | None = None) -> list[DatasetItem]:
    """Read a local JSONL dataset whole (`lazy_dataset.load_jsonl_lazy`'s validation, then every item parsed)."""
    from userturn.client.data.lazy_dataset import load_jsonl_lazy

    return list(load_jsonl_lazy(path, limit))
