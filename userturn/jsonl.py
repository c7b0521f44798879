"""Results files: append-only JSONL, one `ProbeRecord` per line, one writer at a time, safe against SIGKILL and
full disks.

Each record is written with a single `write()` of a complete line straight to the file descriptor, so a killed
process leaves at most one torn final line; opening a file for append first cuts such a torn tail. A write that
fails or falls short (ENOSPC, EIO) cuts the file back to its last complete line and stops the writer with
`ResultsWriteError` (exit 5). A writer holds the file's lock (`client.results_lock`): a second one gets
`ResultsLocked` (exit 2). Readers keep the last line per key: `read_records` builds whole records,
`client.resume_index.scan_results` streams only what a resume needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import ValidationError

from userturn import results_lock
from userturn.errors import UserError, first_error
from userturn.records import ProbeRecord
from userturn.results_lock import ResultsLocked, ResultsWriteError


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
    """Append records as complete lines to a results file this process holds the writer lock of.

    Unbatched (default), each `write` reaches the kernel before it returns. With `per_tick=True` (the probe's
    hot path, inside a running event loop) the lines of all records completed in the same loop iteration go
    out in one `write()` at the end of that iteration: still before any further network I/O is processed, so
    a kill loses only requests whose answers were being handled at that instant, never a completed line.
    `every=(n, callback)` calls `callback()` after each write that takes the file another `n` bytes further (the
    probe adds to its resume index so).

    Opening takes the file's lock (`client.results_lock`: a second writer gets `ResultsLocked`, exit 2) and cuts
    a torn final line. A failed or short write (disk full, I/O error) truncates the file back to the end of its
    last complete line and raises `ResultsWriteError` (exit 5); every later `write` and `close` raises it again,
    so no run can report success past a lost record, and no torn line is ever left in the middle of the file.
    """

    def __init__(self, path: str | Path, *, per_tick: bool = False, lock: bool = True,
                 every: tuple[int, Callable[[], None]] | None = None) -> None:
        self.path = Path(path)
        self._every = every  # (bytes, callback): called after each write that takes the file past another step
        self.written = 0
        self._per_tick = per_tick
        self._pending: list[bytes] = []
        self._fd = -1
        self._error: ResultsWriteError | None = None
        self._locked = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._as_error(exc, "cannot create the folder of") from None
        if lock:
            results_lock.acquire(self.path)  # before the tail is cut: a live writer's line is never cut
            self._locked = True
        try:
            if self.path.exists():
                _cut_torn_tail(self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._end = os.fstat(self._fd).st_size  # a line boundary: the offset every batch starts at
            self._next_step = self._end + every[0] if every else 1 << 62
        except OSError as exc:
            self._release()
            raise self._as_error(exc, "cannot open") from None

    def write(self, record: ProbeRecord) -> None:
        self.write_line(_to_json(record) + b"\n")

    def write_line(self, line: bytes) -> None:
        """Append one record already serialised as a complete JSON line (see `records.ok_record_line`)."""
        if self._error is not None:
            raise self._error
        self.written += 1
        if not self._per_tick:
            self._write_all(line)
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush_soon)
        self._pending.append(line)

    def _flush_soon(self) -> None:
        """The per-tick flush, run by the event loop: a failure is kept for the next `write_line` or `close`
        (raising here would only reach the loop's exception logger)."""
        with contextlib.suppress(ResultsWriteError):
            self.flush()

    def flush(self) -> None:
        if self._error is not None:
            raise self._error
        if self._pending and self._fd >= 0:
            data = b"".join(self._pending)
            self._pending.clear()
            self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                n = os.write(self._fd, view[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "the write made no progress")
                done += n
        except OSError as exc:
            self._fail(exc, keep=self._end + data.rfind(b"\n", 0, done) + 1)
            raise self._error from None  # type: ignore[misc]
        self._end += done
        if self._end >= self._next_step and self._every is not None:
            step, callback = self._every
            self._next_step = self._end + step
            callback()

    def _fail(self, exc: OSError, *, keep: int) -> None:
        """Stop writing for good: cut the file back to its last complete line (`keep` bytes) and remember why."""
        self._pending.clear()
        cut = ""
        try:
            os.ftruncate(self._fd, keep)
        except OSError:
            cut = " (a partial last line is left; it is cut when the file is next opened)"
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
        self._error = self._as_error(exc, "cannot write", f"; the complete records before it are kept{cut}; "
                                     "rerun the same command to resume once the problem is fixed")

    def _as_error(self, exc: OSError, what: str, tail: str = "") -> ResultsWriteError:
        return ResultsWriteError(f"{what} {self.path}: {exc.strerror or exc}{tail}")

    def close(self) -> None:
        """Write what is pending, make it durable (fsync) and release the lock. Raises the write error, if any."""
        try:
            if self._fd >= 0:
                try:
                    self.flush()
                    os.fsync(self._fd)
                except OSError as exc:  # fsync: a delayed write error (NFS, a failing disk)
                    self._fail(exc, keep=self._end)
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
        finally:
            self._release()
        if self._error is not None:
            raise self._error

    def _release(self) -> None:
        if self._locked:
            self._locked = False
            results_lock.release(self.path)

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["JsonlWriter", "ReadReport", "ResultsLocked", "ResultsWriteError", "iter_lines", "read_records"]
