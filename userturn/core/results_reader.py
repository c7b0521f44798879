"""The one reader of results files: which line of a file counts, decided here for every view.

A results file is JSONL: configuration lines (`"type": "config"`, `ConfigLine`) and record lines (`ProbeRecord`).
This module owns the rules every reader shares; the views (`jsonl.read_records` and `compact`, the resume scan
`resume_index`, the report scan, the judge backlog, show, export, rerank, posttrain) only fold its lines:

- lines: `read_lines` (every non-empty line with its number, byte offset and whether it is complete), or for a hot
  loop `raw_lines` (numbered lines as read, newline kept);
- configuration lines: `is_config_line` (raw bytes), `config_line` (a decoded line), and the configuration a record
  of schema 2 carries itself (`legacy_config`);
- torn tails and damaged lines: `decode` / `decode_raw` (a line that does not decode is skipped when it is the
  file's torn final line, without a newline, and is `errors.damaged_line` otherwise: one message naming file:line
  and the way out, in every command);
- superseded lines: a later line of the same identity replaces an earlier one: `Current` (a dict of current lines
  that counts the superseded ones) and `last_of_each` (the same rule on a numpy column of identity hashes). The
  identity is the view's: (key, configuration fingerprint) for the report and `compact`, the key for the readers
  of whole records, resume and the judge backlog.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import msgspec
import orjson
from pydantic import ValidationError

from userturn.core.errors import UserError, damaged_line, first_error
from userturn.core.records import ConfigLine, ProbeRecord

if TYPE_CHECKING:
    import numpy as np  # imported by `last_of_each` only: the probe's resume never loads numpy

BUFFER_BYTES = 1 << 20  # the file is read in reads this big (its lines are split in C)

R = TypeVar("R")
V = TypeVar("V")


class Line(NamedTuple):
    """One non-empty line: its 1-based number, the byte offset it starts at, its bytes without surrounding
    whitespace, and whether it ends with a newline (a final line without one is a write cut short)."""

    number: int
    offset: int
    raw: bytes
    complete: bool


def open_results(path: Path) -> IO[bytes]:
    """`path` opened for reading with a large buffer; UserError naming it when it cannot be read."""
    try:
        return path.open("rb", buffering=BUFFER_BYTES)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None


def raw_lines(fh: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, line as read, newline kept) of every line of an open file: the hot-loop form of `read_lines`
    (no object per line; blank lines included, `line.strip()` tells them)."""
    return enumerate(fh, start=1)


def read_lines(path: Path) -> Iterator[Line]:
    """Every non-empty line of a results file, in order (see `Line`)."""
    offset = 0
    try:
        with open_results(path) as fh:
            for number, raw in raw_lines(fh):
                start, offset = offset, offset + len(raw)
                line = raw.strip()
                if line:
                    yield Line(number, start, line, raw.endswith(b"\n"))
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None


def _is_config(obj: Any) -> bool:
    """What makes a decoded results line a configuration line, for every reader: `"type": "config"`."""
    return isinstance(obj, dict) and obj.get("type") == "config"


def config_line(obj: Any) -> ConfigLine | None:
    """A decoded results line as a `ConfigLine` when it is one (`"type": "config"`), else None (a record).
    Raises ValidationError for a malformed configuration line."""
    return ConfigLine.model_validate(obj) if _is_config(obj) else None


def is_config_line(raw: bytes) -> bool:
    """Whether a raw results line is a configuration line (`config_line` of its JSON is one), in whatever key order
    and spacing it was written (`json.dumps`, `jq -S`); what userturn writes (`"type"` first, compact) is told
    without parsing. A line that is not JSON is no configuration line (the readers of records name it)."""
    line = raw.lstrip()
    if line.startswith(b'{"type":"config"'):
        return True
    if b'"type"' not in line or b'"config"' not in line:
        return False
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return _is_config(obj)


class _Nothing(msgspec.Struct):
    """No field: decoding into it checks a line's JSON syntax and UTF-8 without building any Python object."""


_check_json = msgspec.json.Decoder(_Nothing).decode


def is_json(raw: bytes) -> bool:
    """Whether a line is one well-formed JSON object (the resume scan's proof that a line whose head and end are a
    record's is not damaged in between: several times cheaper than parsing it)."""
    try:
        _check_json(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return True


def legacy_config(obj: Any) -> ConfigLine | None:
    """The configuration a record of schema 2 carries itself (`config` beside `config_fingerprint`), else None."""
    if isinstance(obj, dict) and isinstance(obj.get("config"), dict) and isinstance(obj.get("config_fingerprint"), str):
        return ConfigLine(fingerprint=obj["config_fingerprint"], config=obj["config"])
    return None


def describe_error(exc: Exception) -> str:
    """One line saying why a line is no record."""
    if isinstance(exc, ValidationError):
        return first_error(exc, "record")
    return str(exc).split("\n")[0]


def decode(path: Path, line: Line, check: Callable[[Any], R]) -> ConfigLine | R | None:
    """One line decoded: its `ConfigLine` for a configuration line, else `check(its JSON)` (a record, as the view
    wants it; `check` raises ValueError or ValidationError when it is none). None for the torn final line; any
    other line that does not decode is `errors.damaged_line` naming path:line."""
    return decode_raw(path, line.number, line.raw, line.complete, check)


def decode_raw(path: Path, number: int, raw: bytes, complete: bool, check: Callable[[Any], R]) -> ConfigLine | R | None:
    """`decode` of a line given by its parts (a hot loop's `raw_lines`: no `Line` made)."""
    try:
        obj = orjson.loads(raw)
        config = config_line(obj)
        return config if config is not None else check(obj)
    except ValueError as exc:  # orjson.JSONDecodeError and pydantic's ValidationError are ValueErrors
        if not complete:
            return None
        raise damaged_line(path, number, describe_error(exc)) from None


def decode_with(path: Path, number: int, raw: bytes, decoder: Callable[[bytes], R]) -> R | None:
    """A record line decoded by a typed decoder of the few fields a view reads (`msgspec.json.Decoder(Struct)`: the
    whole line's JSON is checked, only those fields are built). None for the torn final line (no newline);
    `errors.damaged_line` naming path:line for any other line that does not decode."""
    try:
        return decoder(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        if not raw.endswith(b"\n"):
            return None
        raise damaged_line(path, number, str(exc).split("\n")[0]) from None


def line_number_at(path: Path, offset: int) -> int:
    """The number of the line that starts at byte `offset` of a file (for an error found on a line read back by
    its offset: counted only then)."""
    count = 1
    with open_results(path) as fh:
        while offset > 0:
            chunk = fh.read(min(offset, BUFFER_BYTES))
            if not chunk:
                break
            count += chunk.count(b"\n")
            offset -= len(chunk)
    return count


class Current(Generic[V]):
    """The current value per identity, lines taken in file order: a later line of an identity supersedes the
    earlier one (`superseded` counts them)."""

    def __init__(self, lines: dict[Any, V] | None = None) -> None:
        self.lines: dict[Any, V] = {} if lines is None else lines  # given: go on from lines read before
        self.superseded = 0

    def put(self, identity: Hashable, value: V) -> V | None:
        """Take a line; the value it supersedes, if any."""
        earlier = self.lines.get(identity)
        if earlier is not None:
            self.superseded += 1
        self.lines[identity] = value
        return earlier


def last_of_each(identities: np.ndarray) -> np.ndarray:
    """`Current`'s rule on a column: True per line that is the last of its identity (equal values, e.g. digests), in
    file order."""
    import numpy as np

    _, last_from_end = np.unique(identities[::-1], return_index=True)  # the first of each, from the end
    keep = np.zeros(len(identities), dtype=bool)
    keep[len(identities) - 1 - last_from_end] = True
    return keep


def parse_record(raw: bytes, path: object, number: int | str) -> ProbeRecord:
    """One results line (line `number` of `path`) as a record; `errors.damaged_line` when it is none."""
    try:
        return ProbeRecord.model_validate_json(raw)
    except ValidationError as exc:
        raise damaged_line(path, number, first_error(exc, 'record')) from None
