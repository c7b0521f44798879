"""The up-front validation of a JSONL dataset kept on disk (`lazy_dataset.load_jsonl_lazy`), on two cores.

Every line is parsed and validated before any request, so a bad line stops a run before it spends anything. At
one sample per item that pass is a sizeable part of a probe's start-up (~10 us a GSM8K-sized item). A file of at
least `SPLIT_MIN_BYTES` is validated in two halves at once: the second by a forked process, which sends back what
it kept (offsets, line numbers, CRC-32s, ids, whether each item ends with an assistant turn and whether it names a
scorer) or its first error.
The result and the error are the ones a single pass gives: the first problem in file order, whichever half saw it,
and an id repeated across the halves is named on the line where the single pass would have stopped.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from userturn.client import dataset
from userturn.client.dataset import DatasetItem, parse_item_line

from userturn.errors import UserError

SPLIT_MIN_BYTES = 4 << 20  # smaller files: one pass (a fork costs ~2 ms; 4 MiB of items take ~35 ms to validate)
_COUNT_CHUNK = 1 << 20


@dataclass
class Scan:
    """What validation keeps of a run of lines, or the first problem in it (`error`, on line `error_line`)."""

    offsets: array = field(default_factory=lambda: array("q"))
    numbers: array = field(default_factory=lambda: array("q"))
    checksums: array = field(default_factory=lambda: array("I"))
    ids: list[str] = field(default_factory=list)
    ended: bytearray = field(default_factory=bytearray)
    names_scorer: bytearray = field(default_factory=bytearray)  # 1 where the item's meta has a `scorer` key
    error: str | None = None
    error_line: int = 0

    def extend(self, later: Scan) -> None:
        self.offsets.extend(later.offsets)
        self.numbers.extend(later.numbers)
        self.checksums.extend(later.checksums)
        self.ids.extend(later.ids)
        self.ended.extend(later.ended)
        self.names_scorer.extend(later.names_scorer)


def scan_lines(path: Path, start: int = 0, end: int | None = None, first_number: int = 1,
               limit: int | None = None, items: list[DatasetItem] | None = None) -> Scan:
    """Validate the lines from byte `start` (a line start, numbered `first_number`) to byte `end` (a line start,
    or the end of the file); stop at the first problem, or after `limit` items. `items` collects the parsed items
    (`dataset.load_jsonl`, which keeps them)."""
    scan = Scan()
    seen: dict[str, int] = {}
    offset = start
    number = first_number - 1
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            while (end is None or offset < end) and (line := fh.readline(dataset.MAX_LINE_BYTES + 1)):
                number += 1
                if len(line) > dataset.MAX_LINE_BYTES:
                    raise UserError(f"{path}:{number}: line longer than {dataset.MAX_LINE_BYTES >> 20} MiB")
                line_start, offset = offset, offset + len(line)
                raw = line.strip()
                if not raw:
                    continue
                item = parse_item_line(path, number, raw, locate=items is not None)
                if item.id in seen:
                    raise UserError(f"{path}:{number}: duplicate id {item.id!r} (first on line {seen[item.id]})")
                seen[item.id] = number
                scan.offsets.append(line_start)
                scan.numbers.append(number)
                scan.checksums.append(zlib.crc32(raw))
                scan.ids.append(item.id)
                scan.ended.append(item.ends_with_assistant)
                scan.names_scorer.append(item.meta is not None and "scorer" in item.meta)
                if items is not None:
                    items.append(item)
                if limit is not None and len(scan.ids) >= limit:
                    break
    except UserError as exc:
        scan.error, scan.error_line = str(exc), number
    return scan


def scan_dataset(path: Path, limit: int | None = None) -> Scan:
    """Validate the whole file (or its first `limit` items) as one pass would; raises the first problem."""
    size = path.stat().st_size
    middle = _line_start_after(path, size // 2) if limit is None and size >= SPLIT_MIN_BYTES and _can_fork() else 0
    scan = _scan_halves(path, middle) if 0 < middle < size else scan_lines(path, limit=limit)
    if scan.error is not None:
        raise UserError(scan.error)
    return scan


def _scan_halves(path: Path, middle: int) -> Scan:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: validates the second half, sends it, never returns
        status = 1
        try:
            os.close(read_fd)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it ends the child
            data = pickle.dumps(scan_lines(path, middle, first_number=_newlines_before(path, middle) + 1),
                                protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    try:
        first = scan_lines(path, 0, middle)
        if first.error is not None:
            return first  # the earliest problem in the file: the second half does not matter
        with os.fdopen(read_fd, "rb") as pipe:
            read_fd = -1
            data = pipe.read()
        second = _second_half(data) or scan_lines(path, middle, first_number=_newlines_before(path, middle) + 1)
    finally:
        if read_fd >= 0:
            os.close(read_fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return _joined(path, first, second)


def _second_half(data: bytes) -> Scan | None:
    """The child's scan, or None when it died before sending one (then the parent scans that half itself)."""
    try:
        scan = pickle.loads(data)
    except Exception:
        return None
    return scan if isinstance(scan, Scan) else None


def _joined(path: Path, first: Scan, second: Scan) -> Scan:
    """Both halves as one pass: an id of the first half seen again in the second stops the pass there, unless the
    second half's own first problem comes earlier."""
    seen = dict(zip(first.ids, first.numbers, strict=True))
    for item_id, number in zip(second.ids, second.numbers, strict=True):
        if item_id in seen:
            if second.error is None or number < second.error_line:
                first.error = f"{path}:{number}: duplicate id {item_id!r} (first on line {seen[item_id]})"
                first.error_line = number
                return first
            break
    first.extend(second)
    first.error, first.error_line = second.error, second.error_line
    return first


def _line_start_after(path: Path, position: int) -> int:
    """The offset of the first line that starts after byte `position` (0 when none does)."""
    with path.open("rb") as fh:
        fh.seek(position)
        rest = fh.readline(dataset.MAX_LINE_BYTES + 1)
        return fh.tell() if rest.endswith(b"\n") else 0  # no split inside an over-long line: one pass refuses it


def _newlines_before(path: Path, end: int) -> int:
    count = 0
    with path.open("rb") as fh:
        while end > 0 and (chunk := fh.read(min(_COUNT_CHUNK, end))):
            count += chunk.count(b"\n")
            end -= len(chunk)
    return count


def _can_fork() -> bool:
    from userturn.client.job_feed import can_fork

    return can_fork() and (os.cpu_count() or 1) >= 2
