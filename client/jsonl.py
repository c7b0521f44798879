"""Results files: append-only JSONL, one `ProbeRecord` per line, safe against SIGKILL.

Each record is written with a single `write()` of a complete line straight to the file descriptor,
so a killed process leaves at most one torn final line. Opening a file for append first cuts such a
torn tail, so the next run never glues a new record onto it. Readers keep the last line per key.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import ValidationError
from userturn.client.errors import UserError, first_error
from userturn.client.records import ProbeRecord


@dataclass
class ReadReport:
    """What reading a results file found besides valid records."""

    lines: int = 0
    torn_tail: bool = False
    duplicates: int = 0
    skipped: list[str] = field(default_factory=list)


def _cut_torn_tail(path: Path) -> bool:
    """Make the file end at a line boundary before appending. Returns True if it cut a torn line.

    A final line without a newline is a write cut by a kill: it is cut, unless it is a complete record that
    only lacks its newline (the reader counts such a line as done), in which case the newline is added.
    """
    size = path.stat().st_size
    if size == 0:
        return False
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return False
        # Walk back to the previous newline.
        pos = size
        chunk = 65536
        start_of_tail = 0
        while pos > 0:
            start = max(0, pos - chunk)
            fh.seek(start)
            block = fh.read(pos - start)
            idx = block.rfind(b"\n")
            if idx >= 0:
                start_of_tail = start + idx + 1
                break
            pos = start
        fh.seek(start_of_tail)
        if _is_record(fh.read()):
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")
            return False
        fh.truncate(start_of_tail)
        return True


def _is_record(raw: bytes) -> bool:
    try:
        ProbeRecord.model_validate(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError):
        return False
    return True


def iter_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (line number, raw line, complete?) for each non-empty line."""
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            complete = raw.endswith(b"\n")
            raw = raw.strip()
            if raw:
                yield number, raw, complete


def read_records(path: str | Path, *, strict: bool = True) -> tuple[dict[str, ProbeRecord], ReadReport]:
    """Read a results file into {key: last record}. A torn final line is ignored (and reported).

    A malformed complete line raises UserError naming file:line when `strict`, else it is skipped
    and listed in the report.
    """
    path = Path(path)
    report = ReadReport()
    records: dict[str, ProbeRecord] = {}
    if not path.exists():
        return records, report
    for number, raw, complete in iter_lines(path):
        report.lines += 1
        try:
            record = ProbeRecord.model_validate(orjson.loads(raw))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            if not complete:
                report.torn_tail = True
                continue
            message = f"{path}:{number}: not a userturn record ({_first_error(exc)})"
            if strict:
                raise UserError(message) from None
            report.skipped.append(message)
            continue
        if record.key in records:
            report.duplicates += 1
        records[record.key] = record
    return records, report


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return first_error(exc, "record")
    return str(exc).split("\n")[0]


_to_json = ProbeRecord.__pydantic_serializer__.to_json


class JsonlWriter:
    """Append records as complete lines.

    Unbatched (default), each `write` reaches the kernel before it returns. With `per_tick=True` (the probe's
    hot path, inside a running event loop) the lines of all records completed in the same loop iteration go
    out in one `write()` at the end of that iteration: still before any further network I/O is processed, so
    a kill loses only requests whose answers were being handled at that instant, never a completed line.
    """

    def __init__(self, path: str | Path, *, per_tick: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            _cut_torn_tail(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.written = 0
        self._per_tick = per_tick
        self._pending: list[bytes] = []

    def write(self, record: ProbeRecord) -> None:
        self.write_line(_to_json(record) + b"\n")

    def write_line(self, line: bytes) -> None:
        """Append one record already serialised as a complete JSON line (see `records.ok_record_line`)."""
        self.written += 1
        if not self._per_tick:
            self._write_all(line)
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append(line)

    def flush(self) -> None:
        if self._pending and self._fd >= 0:
            data = b"".join(self._pending)
            self._pending.clear()
            self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
