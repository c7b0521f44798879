"""The up-front validation of a JSONL dataset (`lazy_dataset.load_jsonl_lazy`, `dataset.load_jsonl`): one pass.

Every line is parsed and validated before any request, so a bad line stops a run before it spends anything. The
pass keeps, per item, its offset, line number, CRC-32, id, whether it ends with an assistant turn and whether it
names a scorer (~10 us a GSM8K-sized item), or stops at the first problem in file order.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from userturn.client.data import dataset
from userturn.client.data.dataset import DatasetItem, parse_item_line

from userturn.core.errors import UserError


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
    """Validate the whole file (or its first `limit` items) in one pass; raises the first problem."""
    scan = scan_lines(path, limit=limit)
    if scan.error is not None:
        raise UserError(scan.error)
    return scan
