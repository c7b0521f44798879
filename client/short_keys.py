"""Short record keys: the first hex digits of a key's sha256, as few as keep every key of a file apart (at least
`MIN_DIGITS`), like git's short commit ids. `userturn show` prints them; `userturn show FILE SHORTKEY` opens the
one record whose key, or whose key's sha256, starts with SHORTKEY (an ambiguous prefix is refused).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from userturn.core.errors import UserError
from userturn.core.results_files import as_paths
from userturn.core.results_reader import decode, read_lines

MIN_DIGITS = 7


def key_hash(key: str) -> str:
    """The full hex sha256 of a record key (a short key is a prefix of it)."""
    return hashlib.sha256(key.encode()).hexdigest()


def short_keys(keys: Iterable[str]) -> dict[str, str]:
    """{key: its shortest hash prefix (at least `MIN_DIGITS` long) that no other of `keys` shares}."""
    hashes = {key: key_hash(key) for key in set(keys)}
    ordered = sorted(hashes.values())
    needed: dict[str, int] = {}
    for before, after in itertools.pairwise(ordered):
        common = next((i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b), len(before))
        for h in (before, after):
            needed[h] = max(needed.get(h, MIN_DIGITS), common + 1)
    return {key: h[: needed.get(h, MIN_DIGITS)] for key, h in hashes.items()}


def _json_object(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def keyed_lines(files: Sequence[Path]) -> Iterator[tuple[Path, int, bytes, dict[str, Any]]]:
    """(file, line number, raw line, object) of each record line of results files, read one at a time
    (`results_reader.decode`: configuration lines and the torn final line are passed over; a line that is not a JSON
    object is a UserError naming file:line)."""
    for path in files:
        for line in read_lines(path):
            obj = decode(path, line, _json_object)
            if isinstance(obj, dict):
                yield path, line.number, line.raw, obj


def resolve_key(paths: str | Path | Sequence[str | Path], text: str) -> str:
    """The full key `text` names in a results file (or several): itself when a record has that key, else the one
    key that starts with it or whose sha256 does. Ambiguous: a UserError with the count; none: `text`
    unchanged (the caller's lookup reports it with the closest keys)."""
    if not text:
        return text
    files = as_paths(paths)
    matches: set[str] = set()
    lowered = text.lower()
    for _, _, _, obj in keyed_lines(files):
        key = obj.get("key")
        if key == text:
            return text
        if isinstance(key, str) and (key.startswith(text) or key_hash(key).startswith(lowered)):
            matches.add(key)
    if len(matches) > 1:
        shown = ", ".join(sorted(short_keys(matches).values())[:3])
        raise UserError(f"{' '.join(map(str, files))}: key prefix {text!r} is ambiguous: {len(matches)} records "
                        f"match ({shown}{', …' if len(matches) > 3 else ''}); give more characters")
    return next(iter(matches), text)
