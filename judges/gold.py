"""Gold labels given by people: the one format `userturn label` appends and `report --gold` / `judge-eval` read.

A gold file is JSONL, one answer per line, appended and flushed as it is given:
`{"key", "label", "labeller", "note", "user_turn", "messages", "at"}`. `key` is the results record's key (so a gold
line matches a judged record), `label` a name from the label table, or null for an answer taken back (undo) or
skipped (`skipped: true`). The last line per (key, labeller) is the answer; earlier ones are history. `user_turn`
and `messages` (the conversation as probed) make the line usable without its results file (`judge-eval`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from userturn.core.errors import UserError, first_error
from userturn.core.files import jsonl_objects
from userturn.core.records import Message
from userturn.core.taxonomy import Label


class GoldLine(BaseModel):
    """One answer of one labeller for one record."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1)
    label: Label | None = None
    labeller: str = Field(min_length=1)
    note: str | None = None
    skipped: bool = False
    user_turn: str | None = None
    messages: list[Message] = Field(default_factory=list)
    at: str | None = None


def now() -> str:
    """The `at` stamp of an answer: UTC, ISO 8601, seconds."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def append_gold(path: Path, line: GoldLine) -> None:
    """Append one answer and flush it to disk before returning (a closed tab or Ctrl-C loses nothing given)."""
    data = orjson.dumps(line.model_dump(exclude_none=True)) + b"\n"
    with path.open("ab") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def read_gold_lines(path: Path) -> list[GoldLine]:
    """Every line of one gold file in order; a bad line is a UserError naming file:line."""
    if not path.is_file():
        raise UserError(f"gold file not found: {path}")
    lines: list[GoldLine] = []
    for number, obj in jsonl_objects(path):
        try:
            lines.append(GoldLine.model_validate(obj))
        except ValidationError as exc:
            raise UserError(f"{path}:{number}: not a gold label line ({first_error(exc, 'line')})") from None
    return lines


def current_answers(lines: Iterable[GoldLine]) -> dict[tuple[str, str], GoldLine]:
    """The answer per (key, labeller): the last line of each pair, kept only where it gives a label."""
    last: dict[tuple[str, str], GoldLine] = {}
    for line in lines:
        last[(line.key, line.labeller)] = line
    return {pair: line for pair, line in last.items() if line.label is not None and not line.skipped}


def read_gold(paths: Iterable[Path]) -> dict[tuple[str, str], GoldLine]:
    """`current_answers` over several gold files read in order (a later file's line overrides an earlier one)."""
    lines: list[GoldLine] = []
    for path in paths:
        lines.extend(read_gold_lines(Path(path)))
    return current_answers(lines)
