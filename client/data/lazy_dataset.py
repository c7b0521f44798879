"""A local JSONL dataset that stays on disk: memory flat in the number of items.

`load_jsonl_lazy` validates every line up front (file:line errors, duplicate ids) but keeps only each item's offset,
id, CRC-32 and a few flags (~75 bytes an item); an item is parsed again when used. A re-read line with the validated
CRC-32 holds the same bytes, so the hostile-input checks are not run again (a line changed since is refused).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import random
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar, overload

import orjson
from pydantic import ValidationError

from userturn.client.data.dataset import MAX_LINE_BYTES, DatasetItem, parse_item_line
from userturn.core.errors import UserError

T = TypeVar("T")
NAMES_SCORER, HAS_ANSWER = 1, 2  # an item's flags: its meta names a scorer; it carries an `answer`
SCREEN_BLOCK = 1 << 20  # bytes of consecutive lines a screen looks at in one go (`JsonlItems.raw_lines`)


class JsonlItems(Sequence[DatasetItem]):
    """Validated items of a JSONL file, parsed on access. Slicing and `shuffled` give views without parsing."""

    def __init__(self, path: Path, offsets: array, ids: list[str], assistant_ended: bytearray,
                 numbers: array, checksums: array, flags: bytearray, in_file_order: bool = True) -> None:
        self.path = path
        self._in_file_order = in_file_order  # offsets increase: a line's neighbours in the view are in the file
        self._offsets = offsets
        self._numbers = numbers  # line numbers, for errors that name file:line
        self._checksums = checksums  # CRC-32 of each validated (stripped) line
        self.ids = ids  # item ids, in order
        self._assistant_ended = assistant_ended
        self._flags = flags  # NAMES_SCORER | HAS_ANSWER of each item, seen when it was validated (scoring)

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> DatasetItem: ...

    @overload
    def __getitem__(self, index: slice) -> JsonlItems: ...

    def __getitem__(self, index: int | slice) -> DatasetItem | JsonlItems:
        if isinstance(index, slice):
            return JsonlItems(self.path, self._offsets[index], self.ids[index], self._assistant_ended[index],
                              self._numbers[index], self._checksums[index], self._flags[index],
                              self._in_file_order and (index.step or 1) > 0)
        with self.path.open("rb") as fh:
            fh.seek(self._offsets[index])
            return self._parse(index, fh.readline(MAX_LINE_BYTES + 1).strip())

    def __iter__(self) -> Iterator[DatasetItem]:
        for index, raw in self._lines(range(len(self._offsets))):
            yield self._parse(index, raw)

    def read_tagged(self, tagged: Iterable[tuple[int, T]]) -> Iterator[tuple[DatasetItem, T]]:
        """(item, tag) for each (index, tag), in the order given (a resume skipping finished items), parsed from one
        open file."""
        pairs, tags = itertools.tee(tagged)
        for (index, raw), (_, tag) in zip(self._lines(index for index, _ in pairs), tags, strict=True):
            yield self._parse(index, raw), tag

    def raw_lines(self, screen: Callable[[bytes], bool] | None = None) -> Iterator[tuple[int, bytes]]:
        """(index, the item's JSON line, stripped) for every item in order, unparsed. With `screen`, a run of lines
        (~1 MiB) whose bytes together fail it is left out, which is right for a screen that passes a text when some
        substring of it without a newline matches (memchr, `in`, a regex without newlines); the caller still screens
        each line it is given."""
        if screen is None or not self._in_file_order:
            yield from self._lines(range(len(self._offsets)))
            return
        offsets, count = self._offsets, len(self._offsets)
        with self.path.open("rb") as fh:
            first = 0
            while first < count:
                start = offsets[first]
                end = max(bisect.bisect_left(offsets, start + SCREEN_BLOCK, first + 1), first + 1)
                fh.seek(start)  # the block: the lines of items first..end-1, and the blank lines between them
                block = fh.read(offsets[end - 1] - start) + fh.readline(MAX_LINE_BYTES + 1)
                if screen(block):
                    for index in range(first, end):
                        position = offsets[index] - start
                        stop = block.find(b"\n", position)
                        yield index, block[position:stop if stop >= 0 else len(block)].strip()
                first = end

    def _lines(self, indices: Iterable[int]) -> Iterator[tuple[int, bytes]]:
        """(index, stripped line) for each index, from one open file. A line that starts where the last one ended is
        read without a seek (a seek drops the read buffer: every line would cost a read of its own)."""
        with self.path.open("rb") as fh:
            position = -1
            for index in indices:
                offset = self._offsets[index]
                if offset != position:
                    fh.seek(offset)
                line = fh.readline(MAX_LINE_BYTES + 1)
                position = offset + len(line)
                yield index, line.strip()

    def _parse(self, index: int, raw: bytes) -> DatasetItem:
        """The item of a line validated up front: the same bytes (CRC-32), so parsing and validating cannot fail
        (and a collision that slips through is still validated); anything else means the file changed."""
        if zlib.crc32(raw) == self._checksums[index]:
            with contextlib.suppress(orjson.JSONDecodeError, ValidationError):
                item = DatasetItem.model_validate(orjson.loads(raw)).located(f"{self.path}:{self._numbers[index]}")
                if item.id == self.ids[index]:
                    return item
        raise UserError(f"{self.path}: the file changed while the run was reading it (item {self.ids[index]!r})")

    def scorer_naming(self) -> list[int]:
        """The indices of the items whose meta names a scorer (seen when they were validated)."""
        return [index for index, flags in enumerate(self._flags) if flags & NAMES_SCORER]

    def answering_without_scorer(self) -> list[int]:
        """The indices of the items that carry an `answer` and whose meta names no scorer."""
        return [index for index, flags in enumerate(self._flags) if flags & (HAS_ANSWER | NAMES_SCORER) == HAS_ANSWER]

    def first_open(self) -> tuple[int, str, str] | None:
        """(how many items do not end with an assistant turn, the first one's id, its `file:line`), or None when
        every item ends with one."""
        open_items = [index for index, ended in enumerate(self._assistant_ended) if not ended]
        if not open_items:
            return None
        first = open_items[0]
        return len(open_items), self.ids[first], f"{self.path}:{self._numbers[first]}"

    @property
    def all_end_with_assistant(self) -> bool:
        return all(self._assistant_ended)

    def shuffled(self, seed: int) -> JsonlItems:
        """The same order `random.Random(seed).shuffle` gives a list of the parsed items."""
        order = list(range(len(self)))
        random.Random(seed).shuffle(order)
        return self.take(order)

    def take(self, order: Sequence[int]) -> JsonlItems:
        """A view of the items at `order` (indices into this view), without parsing."""
        in_file_order = self._in_file_order and all(a < b for a, b in itertools.pairwise(order))
        return JsonlItems(self.path, array("q", (self._offsets[i] for i in order)), [self.ids[i] for i in order],
                          bytearray(self._assistant_ended[i] for i in order),
                          array("q", (self._numbers[i] for i in order)),
                          array("I", (self._checksums[i] for i in order)),
                          bytearray(self._flags[i] for i in order), in_file_order)


def load_jsonl_lazy(path: str | Path, limit: int | None = None) -> JsonlItems:
    """Validate a local JSONL dataset in one pass (every line, or the first `limit` items) and return it as a
    `JsonlItems`. Any bad line is a UserError naming `file:line` and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"dataset not found: {path}")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1 (got {limit})")
    offsets, numbers, checksums = array("q"), array("q"), array("I")
    ids: list[str] = []
    ended, flags = bytearray(), bytearray()
    seen: dict[str, int] = {}
    offset = 0
    with path.open("rb") as fh:
        for number, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if len(line) > MAX_LINE_BYTES:
                raise UserError(f"{path}:{number}: line longer than {MAX_LINE_BYTES >> 20} MiB")
            line_start, offset = offset, offset + len(line)
            raw = line.strip()
            if not raw:
                continue
            item = parse_item_line(path, number, raw)
            if item.id in seen:
                raise UserError(f"{path}:{number}: duplicate id {item.id!r} (first on line {seen[item.id]})")
            seen[item.id] = number
            offsets.append(line_start)
            numbers.append(number)
            checksums.append(zlib.crc32(raw))
            ids.append(item.id)
            ended.append(item.ends_with_assistant)
            flags.append((NAMES_SCORER if item.meta is not None and item.meta.get("scorer") is not None else 0)
                         | (HAS_ANSWER if item.answer is not None else 0))
            if limit is not None and len(ids) >= limit:
                break
    if not ids:
        raise UserError(f"{path}: no items")
    return JsonlItems(path, offsets, ids, ended, numbers, checksums, flags)
