"""Results files: append-only JSONL of `ProbeRecord` lines and `ConfigLine`s, one writer at a time, safe against
SIGKILL and full disks (`JsonlWriter`), and the views over `userturn.core.results_reader` that need whole records:
`read_records` (the last record per key), `compact` (the current lines only), `read_configs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from userturn.core import results_lock
from userturn.core.errors import UserError
from userturn.core.records import ConfigLine, ProbeRecord
from userturn.core.results_lock import ResultsWriteError
from userturn.core.results_reader import (
    Current,
    Line,
    config_line,
    decode,
    describe_error,
    is_config_line,
    legacy_config,
    open_results,
    raw_lines,
    read_lines,
)

__all__ = ["JsonlWriter", "ReadReport", "compact", "config_line", "describe_error", "is_config_line",
           "legacy_config", "read_configs", "read_records"]


@dataclass
class ReadReport:
    """What reading a results file found besides valid records."""

    lines: int = 0  # record lines
    torn_tail: bool = False
    duplicates: int = 0  # superseded lines: a later line of the same key and configuration replaced them
    configs: dict[str, ConfigLine] = field(default_factory=dict)  # fingerprint -> configuration (its first line)


def read_configs(path: str | Path) -> dict[str, ConfigLine]:
    """The configuration lines of a results file by fingerprint (the first of each), and the configurations its
    records of schema 2 carry themselves; every other line is passed over unparsed."""
    configs: dict[str, ConfigLine] = {}
    path = Path(path)
    if not path.is_file():
        return configs
    with open_results(path) as fh:
        for _, raw in raw_lines(fh):
            if b'"config"' not in raw:  # neither a configuration line nor a record of schema 2 carrying one
                continue
            try:
                obj = orjson.loads(raw)
                config = config_line(obj) or legacy_config(obj)
            except (orjson.JSONDecodeError, ValidationError):
                continue  # the readers of records name a malformed line
            if config is not None:
                configs.setdefault(config.fingerprint, config)
    return configs


@dataclass
class CompactReport:
    """What `compact` kept of a results file."""

    records: int = 0  # record lines read
    kept: int = 0  # record lines kept: the last of each key and configuration
    configs: int = 0  # configuration lines kept: the first of each fingerprint
    dropped_configs: int = 0  # later configuration lines of a fingerprint already described (earlier runs' resumes)
    torn_tail: bool = False
    stale_temporaries: int = 0  # hidden temporary files of compacts whose process is gone, removed

    @property
    def superseded(self) -> int:
        return self.records - self.kept


def compact(path: str | Path) -> CompactReport:
    """Rewrite a results file to the first configuration line of each fingerprint and the last record line of each
    (key, configuration), byte for byte and in file order, under the writer lock; the new file replaces the old one
    atomically. A configuration only records of schema 2 carry gets a configuration line at the top. A malformed
    line is a UserError naming file:line, and nothing is rewritten. Temporary files an interrupted compact of this
    file left behind (its process is gone) are removed first."""
    path = Path(path)
    report = CompactReport()
    with results_lock.results_lock(path):
        report.stale_temporaries = _remove_stale_temporaries(path)
        current: Current[int] = Current()  # (key, configuration) -> its current line's number
        first_config: dict[str, int] = {}
        legacy: dict[str, ConfigLine] = {}
        for line in read_lines(path):
            decoded = decode(path, line, _record_and_config)
            if decoded is None:
                report.torn_tail = True
            elif isinstance(decoded, ConfigLine):
                if decoded.fingerprint in first_config:
                    report.dropped_configs += 1
                else:
                    first_config[decoded.fingerprint] = line.number
            else:
                record, old = decoded
                report.records += 1
                current.put((record.key, record.config_fingerprint), line.number)
                if old is not None:
                    legacy.setdefault(old.fingerprint, old)
        keep = {*first_config.values(), *current.lines.values()}
        described = [config for fingerprint, config in legacy.items() if fingerprint not in first_config]
        report.kept, report.configs = len(current.lines), len(first_config) + len(described)
        temporary = path.with_name(f"{_temporary_prefix(path)}{os.getpid()}")
        try:
            with temporary.open("wb") as out:
                out.writelines(config.model_dump_json().encode() + b"\n" for config in described)
                out.writelines(line.raw + b"\n" for line in read_lines(path) if line.number in keep)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise UserError(f"cannot rewrite {path}: {exc.strerror or exc}; the file is unchanged") from None
        with contextlib.suppress(OSError):  # the rename itself durable
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return report


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}.compact-"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_stale_temporaries(path: Path) -> int:
    """Remove the `.NAME.compact-PID` files beside `path` whose process no longer runs (a compact killed before its
    rename); the number removed. Called under the writer lock."""
    prefix, removed = _temporary_prefix(path), 0
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        stale = [entry.path for entry in entries if entry.name.startswith(prefix)
                 and entry.name[len(prefix):].isdigit() and not _process_alive(int(entry.name[len(prefix):]))]
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
            removed += 1
    return removed


def _cut_torn_tail(path: Path) -> None:
    """Make the file end at a line boundary before appending: a final line without a newline (a write cut by a kill)
    is cut, or given its newline when it is a complete line (readers count it as done)."""
    start_of_tail = path.stat().st_size
    if start_of_tail == 0:
        return
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        while start_of_tail > 0:  # walk back to the previous newline, 64 KiB at a time
            start = max(0, start_of_tail - 65536)
            fh.seek(start)
            newline = fh.read(start_of_tail - start).rfind(b"\n")
            if newline >= 0:
                start_of_tail = start + newline + 1
                break
            start_of_tail = start
        fh.seek(start_of_tail)
        if _is_record(fh.read()):
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")
        else:
            fh.truncate(start_of_tail)


def _is_record(raw: bytes) -> bool:
    """A complete record or configuration line (a final line that only lacks its newline)."""
    return decode(Path(), Line(0, 0, raw, complete=False), ProbeRecord.model_validate) is not None


def read_records(path: str | Path) -> tuple[dict[str, ProbeRecord], ReadReport]:
    """Read a results file into {key: last record} and its configurations (`ReadReport.configs`). A torn final
    line is ignored (and reported); a malformed complete line is a UserError naming file:line, and so is a key with
    ok records of two configurations (e.g. two files concatenated); an error record is replaced by a later line of
    any configuration (a rerun with other settings, as resume allows)."""
    path = Path(path)
    report = ReadReport()
    records: dict[str, ProbeRecord] = {}
    if path.exists():
        read_records_into(path, records, report)
    return records, report


def read_records_into(path: Path, records: dict[str, ProbeRecord], report: ReadReport) -> None:
    """`read_records` of one more file into `records` and `report`: several files read in turn count as their
    concatenation (`userturn.core.results_files.read_results`)."""
    current = Current(records)  # per key: an error record is replaced by a later line of any configuration
    for line in read_lines(path):
        decoded = decode(path, line, _record_and_config)
        if decoded is None:
            report.torn_tail = True
            continue
        if isinstance(decoded, ConfigLine):
            report.configs.setdefault(decoded.fingerprint, decoded)
            continue
        record, old = decoded
        report.lines += 1
        if old is not None:
            report.configs.setdefault(old.fingerprint, old)
        earlier = current.put(record.key, record)
        if earlier is not None and earlier.config_fingerprint != record.config_fingerprint and \
                earlier.status == record.status == "ok":
            raise UserError(f"{path}:{line.number}: record {record.key!r} was made with configuration "
                            f"{record.config_fingerprint}, an earlier line of the same key with "
                            f"{earlier.config_fingerprint}: the results read mix two configurations of the "
                            "same samples; read them apart (`userturn report` shows them apart)")
    report.duplicates += current.superseded


def _record_and_config(obj: Any) -> tuple[ProbeRecord, ConfigLine | None]:
    """A record line as its record and the configuration it carries itself (schema 2)."""
    return ProbeRecord.model_validate(obj), legacy_config(obj)


_to_json = ProbeRecord.__pydantic_serializer__.to_json


class JsonlWriter:
    """Append complete lines to a results file, each with a single `write()` (a kill leaves at most a torn last
    line). Opening takes the file's lock (a second writer gets `ResultsLocked`, exit 2) and cuts a torn final line.

    Each `write` reaches the kernel before it returns; with `per_tick=True` (inside a running event loop) the lines
    of one loop iteration go out in one `write()` at its end, before any further network I/O is processed. A failed
    or short write cuts the file back to its last complete line and raises `ResultsWriteError` (exit 5), as does
    every later `write` and `close`.
    """

    def __init__(self, path: str | Path, *, per_tick: bool = False) -> None:
        self.path = Path(path)
        self.written = 0
        self._per_tick = per_tick
        self._pending: list[bytes] = []
        self._fd = -1
        self._error: ResultsWriteError | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._as_error(exc, "cannot create the folder of") from None
        results_lock.acquire(self.path)  # before the tail is cut: a live writer's line is never cut
        self._locked = True
        self._created = False  # the file did not exist before this writer: removed again when nothing was written
        try:
            if self.path.exists():
                _cut_torn_tail(self.path)
            else:
                self._created = True
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._end = os.fstat(self._fd).st_size  # a line boundary: the offset every batch starts at
        except OSError as exc:
            self._release()
            raise self._as_error(exc, "cannot open") from None

    def write(self, record: ProbeRecord) -> None:
        self.written += 1
        self.write_line(_to_json(record) + b"\n")

    def write_config(self, config: ConfigLine) -> None:
        """Append a configuration line (before the first record made with it)."""
        self.write_line(config.model_dump_json().encode() + b"\n")

    def write_line(self, line: bytes) -> None:
        """Append one complete JSON line."""
        if self._error is not None:
            raise self._error
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
            raise self._fail(exc, keep=self._end + data.rfind(b"\n", 0, done) + 1) from None
        self._end += done

    def _fail(self, exc: OSError, *, keep: int) -> ResultsWriteError:
        """Stop writing for good: cut the file back to its last complete line (`keep` bytes); the error, kept."""
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
        return self._error

    def _as_error(self, exc: OSError, what: str, tail: str = "") -> ResultsWriteError:
        return ResultsWriteError(f"{what} {self.path}: {exc.strerror or exc}{tail}")

    def close(self) -> None:
        """Write what is pending, make it durable (fsync) and release the lock; a file this writer created and wrote
        nothing to is removed (under the lock), so a run that wrote nothing leaves no empty results file. Raises the
        write error, if any."""
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
                    if self._created and self._end == 0:
                        with contextlib.suppress(FileNotFoundError):
                            self.path.unlink()
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

