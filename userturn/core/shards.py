"""Sharded runs (`probe --shard I/N`, `run --shard I/N`, `run --workers N`): which items a shard probes and where it
writes.

An item belongs to shard `sha256(item id) mod N` (counted from 1): stable across processes and machines and
independent of the item's position. Everything a run derives from an item depends on its id only, so the shards
together write the records of the unsharded run; the shard is not in the configuration fingerprint. Each shard writes
its own file beside the unsharded one (`results.shard-1-of-2.jsonl`); starting a split beside files of another split
is refused (`check_split`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from userturn.core.errors import UserError

T = TypeVar("T")
MAX_SHARDS = 10_000


class SplitMismatch(UserError):
    """Files of another split of the same run lie beside this shard's file (exit 2)."""


def shard_of(item_id: str, count: int) -> int:
    """The shard (1..count) holding `item_id`: the first 8 bytes of its UTF-8 SHA-256, big-endian, mod `count`."""
    digest = hashlib.sha256(item_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (1 <= index <= count)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`I/N` -> Shard(I, N); a UserError saying what is wrong otherwise."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None:
            raise UserError(f"expected I/N, e.g. 1/4 for the first of four shards, got {text!r}")
        index, count = int(match.group(1)), int(match.group(2))
        if not 1 <= count <= MAX_SHARDS:
            raise UserError(f"N must be between 1 and {MAX_SHARDS}, got {text}")
        if not 1 <= index <= count:
            raise UserError(f"I must be between 1 and N, got {text}")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, item_id: str) -> bool:
        return shard_of(item_id, self.count) == self.index

    def select(self, items: Sequence[T]) -> Sequence[T]:
        """The items of this shard, in their order. A sequence with `ids` and `take` (a dataset kept on disk,
        `client.data.lazy_dataset.JsonlItems`) gives a view of the same kind, without parsing."""
        ids: Sequence[str] | None = getattr(items, "ids", None)
        take: Any = getattr(items, "take", None)
        if ids is not None and take is not None:
            selected: Sequence[T] = take([n for n, item_id in enumerate(ids) if self.holds(item_id)])
            return selected
        return [item for item in items if self.holds(item.id)]  # type: ignore[attr-defined]

    def path(self, path: str | Path) -> Path:
        """This shard's results file beside `path`: `runs/x/results.jsonl` -> `runs/x/results.shard-1-of-2.jsonl`;
        shard 1/1 is the unsharded run and writes `path` itself."""
        path = Path(path)
        if self.count == 1:
            return path
        return path.with_name(f"{path.stem}.shard-{self.index}-of-{self.count}{path.suffix}")


def sharded_path(path: str | Path, shard: Shard | None) -> Path:
    """Where a run writes: `path` itself unsharded, else the shard's file beside it."""
    return Path(path) if shard is None else shard.path(path)


def split_files(path: str | Path) -> dict[Path, int]:
    """{results file: the N of its split} of every non-empty results file of the run whose unsharded file is `path`:
    the unsharded file itself (N = 1) and the shard files beside it (`<stem>.shard-I-of-N<suffix>`)."""
    path = Path(path)
    pattern = re.compile(rf"{re.escape(path.stem)}\.shard-(\d+)-of-(\d+){re.escape(path.suffix)}")
    found: dict[Path, int] = {}
    if not path.parent.is_dir():
        return found
    for candidate in sorted(path.parent.iterdir()):
        match = pattern.fullmatch(candidate.name)
        count = 1 if candidate.name == path.name else int(match.group(2)) if match else None
        if count is not None and candidate.is_file() and candidate.stat().st_size > 0:
            found[candidate] = count
    return found


def check_split(path: str | Path, shard: Shard | None, *, hint: str = "use another --out") -> None:
    """Refuse (SplitMismatch, exit 2) to write `path` split `shard.count` ways (unsharded: 1) when files of another
    split of the same run hold records: the two splits would probe the same items into different files."""
    count = shard.count if shard is not None else 1
    for other, other_count in split_files(path).items():
        if other_count != count:
            held = "unsharded" if other_count == 1 else f"split {other_count} ways (N = {other_count})"
            wanted = f"a split {count} ways" if count > 1 else "an unsharded run"
            again = "unsharded" if other_count == 1 else f"with N = {other_count}"
            raise SplitMismatch(f"{other} holds records of this run {held}; {wanted} would probe the same items "
                                f"again into other files: resume it {again}, or {hint}")


__all__ = ["MAX_SHARDS", "Shard", "SplitMismatch", "check_split", "shard_of", "sharded_path", "split_files"]
