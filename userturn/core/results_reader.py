"""The one reader of results files: which line of a file counts, decided here for every view.

A results file is JSONL: configuration lines (`"type": "config"`, `ConfigLine`) and record lines (`ProbeRecord`).
This module owns the rules every reader shares; the views (`jsonl.read_records` and `compact`, the resume scan
`resume_index`, the report scan, the judge backlog, show, export, rerank, posttrain) only fold its lines:

- lines: `read_lines` (every non-empty line with its number, byte offset and whether it is complete), or for a hot
  loop `raw_lines` (numbered lines as read, newline kept);
- configuration lines: `is_config_line` (raw bytes), `config_line` (a decoded line), and the configuration a record
  of schema 2 carries itself (`legacy_config`);
- torn tails and damaged lines: `decode` / `decode_raw` (a line that does not decode is skipped when it is the
  file's torn final line, without a newline, and is a UserError naming file:line otherwise: `not_a_record`, or
  `errors.damaged_line` where the way out is deleting the line and rerunning);
- superseded lines: a later line of the same identity replaces an earlier one: `Current` (a dict of current lines
  that counts the superseded ones) and `last_of_each` (the same rule on a numpy column of identity hashes). The
  identity is the view's: (key, configuration fingerprint) for the report and `compact`, the key for the readers
  of whole records, resume and the judge backlog.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

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


def not_a_record(path: object, number: int, why: str) -> UserError:
    """The error for a complete line of a results file that is no record: names file:line and why."""
    return UserError(f"{path}:{number}: not a userturn record ({why})")


def decode(path: Path, line: Line, check: Callable[[Any], R], *, damaged: bool = False) -> ConfigLine | R | None:
    """One line decoded: its `ConfigLine` for a configuration line, else `check(its JSON)` (a record, as the view
    wants it; `check` raises ValueError or ValidationError when it is none). None for the torn final line; any
    other line that does not decode is a UserError naming path:line (`errors.damaged_line` when `damaged`)."""
    return decode_raw(path, line.number, line.raw, line.complete, check, damaged)


def decode_raw(path: Path, number: int, raw: bytes, complete: bool, check: Callable[[Any], R],
               damaged: bool = False) -> ConfigLine | R | None:
    """`decode` of a line given by its parts (a hot loop's `raw_lines`: no `Line` made)."""
    try:
        obj = orjson.loads(raw)
        config = config_line(obj)
        return config if config is not None else check(obj)
    except ValueError as exc:  # orjson.JSONDecodeError and pydantic's ValidationError are ValueErrors
        if not complete:
            return None
        raise (damaged_line if damaged else not_a_record)(path, number, describe_error(exc)) from None


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


def parse_record(raw: bytes, where: str) -> ProbeRecord:
    """One results line as a record; UserError naming `where` when it is none."""
    try:
        return ProbeRecord.model_validate_json(raw)
    except ValidationError as exc:
        raise UserError(f"{where}: not a userturn record ({first_error(exc, 'record')})") from None
