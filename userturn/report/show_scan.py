"""`userturn show`'s records read as a stream: one pass keeps a few integers per line (never a record), the
filters are decided on what is present, and the records shown are read back one at a time by byte offset.

Pass one (`scan_shown`) decodes each line with orjson (`results_reader.decode`: configuration lines, the torn tail,
damaged lines as every reader treats them), checks the fields `show` filters on and keeps per record line its key's
digest (`text.digest`), its place (file, byte offset, line number), an interned facet (model, dataset, label,
perturbation, temperature, status, whether it carries a human turn) and its item; after the pass the last line per key
counts (`results_reader.last_of_each`, as `read_results`: a key's later line supersedes its earlier one across files)
and two ok lines in a row of one key under two configurations are refused as `read_results` refuses them. Memory grows
by ~60 bytes a line, not by the records' size; `Shown.records` parses only the records it yields.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord
from userturn.core.results_reader import decode, last_of_each, parse_record, read_lines
from userturn.core.text import digest
from userturn.report.export import HUMAN_TURN
from userturn.report.show import ShowFilter


class Facet(NamedTuple):
    """What `show`'s filters and table header read of a record, besides its item (few distinct values: interned)."""

    model: str
    dataset: str
    label: str  # `show.label_of`: the label, `judge_failed` or `unjudged`
    perturbation: str
    temperature: float
    ok: bool
    fingerprint: str | None
    human: bool  # carries the dataset's human next turn


def _str(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise ValueError(f"{name}: missing or not a string")
    return value


def _facet(obj: Any) -> tuple[str, str, Facet]:
    """(key, item id, facet) of a decoded record line; ValueError naming the field when it is none."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    temperature = obj.get("temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise ValueError("temperature: missing or not a number")
    status, label, fingerprint = obj.get("status"), obj.get("label"), obj.get("config_fingerprint")
    if status not in ("ok", "error"):
        raise ValueError("status: must be 'ok' or 'error'")
    if label is not None and not isinstance(label, str):
        raise ValueError("label: not a string")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ValueError("config_fingerprint: not a string")
    shown = label or ("judge_failed" if obj.get("judge_status") == "error" else "unjudged")
    meta = obj.get("meta")
    human = isinstance(meta, dict) and isinstance(meta.get(HUMAN_TURN), str) and bool(meta[HUMAN_TURN].strip())
    facet = Facet(_str(obj, "model"), _str(obj, "dataset"), shown, _str(obj, "perturbation"), float(temperature),
                  status == "ok", fingerprint, human)
    return _str(obj, "key"), _str(obj, "item_id"), facet


def key_prefix(key: str) -> int:
    """The first 16 hex digits of a key's sha256 as an integer (`client.short_keys.key_hash`'s leading digits)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


@dataclass
class Shown:
    """The records `show` prints, in file order, and what the table says about them."""

    files: list[Path]
    places: np.ndarray = field(repr=False)  # (file index, byte offset, line number) of each record shown, a row each
    ok_count: int  # of them, the ok ones (the table shows only these)
    with_human: bool  # some shown ok record carries a human next turn
    prefixes: np.ndarray = field(repr=False)  # sorted uint64 key-hash prefixes of every current key
    torn_tail: bool = False

    def records(self, *, ok_only: bool = False, limit: int | None = None) -> Iterator[ProbeRecord]:
        """The records, read one at a time by byte offset (`ok_only`: the ok ones; at most `limit`)."""
        handles: dict[int, Any] = {}
        count = 0
        try:
            for index, offset, number in _rows(self.places):
                if limit is not None and count >= limit:
                    return
                fh = handles.get(index)
                if fh is None:
                    fh = handles[index] = self.files[index].open("rb")
                fh.seek(offset)
                record = parse_record(fh.readline(), self.files[index], number)
                if ok_only and record.status != "ok":
                    continue
                count += 1
                yield record
        finally:
            for fh in handles.values():
                fh.close()

    def short_key(self, key: str, min_digits: int) -> str:
        """`client.short_keys.short_keys`' prefix of `key` among every current key (at least `min_digits`)."""
        from userturn.client.short_keys import key_hash

        mine = np.uint64(key_prefix(key))
        at = int(np.searchsorted(self.prefixes, mine))
        digits = min_digits
        for other in (at - 1, at + 1):  # `at` is the key itself
            if 0 <= other < len(self.prefixes):
                differ = int(self.prefixes[other] ^ mine)
                digits = max(digits, 17 - (differ.bit_length() + 3) // 4)  # common hex digits + 1
        return key_hash(key)[:digits]


def _rows(places: np.ndarray, chunk: int = 4096) -> Iterator[tuple[int, int, int]]:
    """The rows of `places` as Python ints, converted a chunk at a time (never a tuple per record at once)."""
    for start in range(0, len(places), chunk):
        yield from places[start:start + chunk].tolist()


class _Lines:
    """Pass one's columns, one entry per record line."""

    def __init__(self) -> None:
        self.key_digest, self.prefix = bytearray(), array("Q")  # 16 bytes a line: `text.digest` of the key
        self.file, self.offset, self.number = array("i"), array("q"), array("q")
        self.facet, self.item = array("i"), array("i")
        self.facets: dict[Facet, int] = {}
        self.items: dict[str, int] = {}

    def add(self, index: int, offset: int, number: int, key: str, item: str, facet: Facet) -> None:
        self.key_digest += digest(key)
        self.prefix.append(key_prefix(key))
        self.file.append(index)
        self.offset.append(offset)
        self.number.append(number)
        self.facet.append(self.facets.setdefault(facet, len(self.facets)))
        self.item.append(self.items.setdefault(item, len(self.items)))


def scan_shown(files: Sequence[Path], rows: ShowFilter) -> Shown:
    """Pass one over `files` (read as their concatenation) and the filters `rows` applied: the records to show.
    UserError naming file:line for a line that is no record, or when a filter matches nothing present."""
    from userturn.client.terminal import matching
    from userturn.report.filters import at_temperatures

    lines = _Lines()
    torn = False
    for index, path in enumerate(files):
        for line in read_lines(path):
            decoded = decode(path, line, _facet)
            if decoded is None:
                torn = True
            elif isinstance(decoded, tuple):
                lines.add(index, line.offset, line.number, *decoded)
    keys = np.frombuffer(lines.key_digest, dtype="V16") if lines.key_digest else np.empty(0, "V16")
    facet_of = np.frombuffer(lines.facet, dtype=np.int32)
    _refuse_mixed_configurations(files, lines, keys, facet_of)
    current = last_of_each(keys) if len(keys) else np.zeros(0, dtype=bool)
    facets = list(lines.facets)
    present = {facets[i] for i in np.unique(facet_of[current])}
    items = list(lines.items)
    models = matching("--model", rows.models, {f.model for f in present})
    datasets = matching("--dataset", rows.datasets, {f.dataset for f in present})
    labels = matching("--label", rows.labels, {f.label for f in present})
    perturbations = matching("--perturb", rows.perturbations, {f.perturbation for f in present})
    item_of = np.frombuffer(lines.item, dtype=np.int32)
    kept_items = matching("--item", rows.items, {items[i] for i in np.unique(item_of[current])})
    at = at_temperatures(rows.temperatures, {f.temperature for f in present}, "record")
    facet_kept = np.array([f.model in models and f.dataset in datasets and f.label in labels
                           and f.perturbation in perturbations and at(f.temperature) for f in facets], dtype=bool)
    item_kept = np.array([item in kept_items for item in items], dtype=bool)
    chosen = current & facet_kept[facet_of] & item_kept[item_of] if len(keys) else current
    where = np.flatnonzero(chosen)
    ok = np.array([f.ok for f in facets], dtype=bool)
    human = np.array([f.human for f in facets], dtype=bool)
    chosen_ok = ok[facet_of[where]] if len(where) else np.zeros(0, dtype=bool)
    places = np.stack([np.frombuffer(lines.file, dtype=np.int32)[where].astype(np.int64),
                       np.frombuffer(lines.offset, dtype=np.int64)[where],
                       np.frombuffer(lines.number, dtype=np.int64)[where]], axis=1)
    prefixes = np.sort(np.frombuffer(lines.prefix, dtype=np.uint64)[current])
    return Shown(list(files), places, int(chosen_ok.sum()),
                 bool((human[facet_of[where]] & chosen_ok).any()) if len(where) else False, prefixes, torn)


def _refuse_mixed_configurations(files: Sequence[Path], lines: _Lines, keys: np.ndarray, facet_of: np.ndarray
                                 ) -> None:
    """`read_results`' rule: a key's ok line followed by an ok line of another configuration is a UserError naming
    the later line (the results read mix two configurations of the same samples)."""
    if len(keys) < 2:
        return
    facets = list(lines.facets)
    ok = np.array([f.ok for f in facets], dtype=bool)[facet_of]
    fingerprint_ids = {fp: i for i, fp in enumerate(dict.fromkeys(f.fingerprint for f in facets))}
    fingerprint = np.array([fingerprint_ids[f.fingerprint] for f in facets], dtype=np.int32)[facet_of]
    order = np.argsort(keys, kind="stable")  # each key's lines together, in file order
    same_key = keys[order][1:] == keys[order][:-1]
    both_ok = ok[order][1:] & ok[order][:-1]
    mixed = np.flatnonzero(same_key & both_ok & (fingerprint[order][1:] != fingerprint[order][:-1]))
    if len(mixed):
        later = int(order[mixed + 1].min())  # the first such line in file order
        path = files[lines.file[later]]
        with path.open("rb") as fh:
            fh.seek(lines.offset[later])
            record = parse_record(fh.readline(), path, lines.number[later])
        raise UserError(f"{path}:{lines.number[later]}: record {record.key!r} was made with configuration "
                        f"{record.config_fingerprint}, an earlier line of the same key with another: the results "
                        "read mix two configurations of the same samples; read them apart (`userturn report` shows "
                        "them apart)")
