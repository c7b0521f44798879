"""What a built-in dataset is: hub sources per split and a row -> DatasetItem mapping."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from userturn.client.data.dataset import DatasetItem
from userturn.core.errors import UserError, first_error
from userturn.core.text import content_text


@dataclass(frozen=True)
class HubSource:
    """Where one split lives on the hub."""

    repo: str
    config: str | None
    split: str
    data_files: str | None = None


RowMapper = Callable[[dict[str, Any], int, str], DatasetItem | None]


@dataclass(frozen=True)
class PackagedSource:
    """A split read from files inside an installed package (no hub): `rows()` in the shape `map_row` expects (a
    UserError when the package is missing); `map_row` overrides the dataset's own mapping."""

    where: str
    rows: Callable[[], Iterable[dict[str, Any]]]
    map_row: RowMapper | None = None



@dataclass(frozen=True)
class BuiltinDataset:
    """A dataset userturn knows by name. `map_row(row, index, split)` returns None to skip a row; `offline` holds
    packaged copies of hub splits, read when the hub copy cannot be loaded."""

    name: str
    summary: str
    splits: dict[str, HubSource | PackagedSource]
    default_split: str
    map_row: RowMapper
    offline: dict[str, PackagedSource] = field(default_factory=dict)

    def source(self, split: str | None) -> HubSource | PackagedSource:
        split = split or self.default_split
        if split not in self.splits:
            raise UserError(f"dataset {self.name!r} has no split {split!r} (choose from {', '.join(self.splits)})")
        return self.splits[split]

    def display_name(self, split: str | None) -> str:
        return self.name if split in (None, self.default_split) else f"{self.name}:{split}"


class RowError(ValueError):
    """A hub row that does not have the shape the mapping expects."""


def require(row: dict[str, Any], name: str) -> Any:
    """row[name], or RowError naming the missing field."""
    if name not in row or row[name] is None:
        raise RowError(f"missing field {name!r} (has: {', '.join(sorted(row)) or 'nothing'})")
    return row[name]


def text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of an OpenAI-style content list."""
    try:
        return content_text(content)
    except TypeError as exc:
        raise RowError(str(exc)) from None


def chat_messages(raw: Any) -> list[dict[str, str]]:
    """[{role, content}] from a hub conversation; 'developer' is kept (Message allows it)."""
    if not isinstance(raw, list) or not raw:
        raise RowError("conversation is not a non-empty list of messages")
    out = []
    for message in raw:
        if not isinstance(message, dict) or "role" not in message:
            raise RowError("conversation message without a role")
        out.append({"role": message["role"], "content": text_of(message.get("content"))})
    return out


def build_item(**fields: Any) -> DatasetItem:
    try:
        return DatasetItem.model_validate(fields)
    except ValidationError as exc:
        raise RowError(first_error(exc, "item")) from None
