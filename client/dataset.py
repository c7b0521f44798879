"""Dataset items: `{"id", "messages", "answer"?, "meta"?}`, read from local JSONL with file:line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field, ValidationError, field_validator
from userturn.client.errors import UserError, first_error
from userturn.client.records import Message


class DatasetItem(BaseModel):
    """One conversation to probe. Ends with an assistant turn, or is answered by the model first."""

    id: str
    messages: list[Message] = Field(min_length=1)
    answer: str | None = None
    meta: dict[str, Any] | None = None

    @field_validator("id", mode="before")
    @classmethod
    def _id_to_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_to_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) else value

    @property
    def ends_with_assistant(self) -> bool:
        return self.messages[-1].role == "assistant"


def _describe(exc: ValidationError) -> str:
    return first_error(exc, "item")


def parse_item_line(path: Path, number: int, raw: bytes) -> DatasetItem:
    """One non-blank dataset line -> DatasetItem; anything wrong is a UserError naming `file:line`."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UserError(f"{path}:{number}: invalid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise UserError(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
    try:
        return DatasetItem.model_validate(obj)
    except ValidationError as exc:
        raise UserError(f"{path}:{number}: {_describe(exc)}") from None


def load_jsonl(path: str | Path, limit: int | None = None) -> list[DatasetItem]:
    """Read a local JSONL dataset. Any bad line is a UserError naming `file:line` and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"dataset not found: {path}")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1 (got {limit})")
    items: list[DatasetItem] = []
    seen: dict[str, int] = {}
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            raw = raw.strip()
            if not raw:
                continue
            item = parse_item_line(path, number, raw)
            if item.id in seen:
                raise UserError(f"{path}:{number}: duplicate id {item.id!r} (first on line {seen[item.id]})")
            seen[item.id] = number
            items.append(item)
            if limit is not None and len(items) >= limit:
                break
    if not items:
        raise UserError(f"{path}: no items")
    return items
