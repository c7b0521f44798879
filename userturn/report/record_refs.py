"""The current records of results files as small references (file, byte offset and the fields that sort and group
them), read back one at a time: what a writer of thousands of records streams from without holding them.

The records are the ones `userturn.core.results_files.read_results` returns (the last line per key, an error record
replaced by a later line of any configuration, two ok lines of one key under two configurations refused), decided
by the same `results_reader` rules (`read_lines`, `decode`, `Current`); only the record objects are dropped after the
pass and read again by offset (`RecordReader`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO, NamedTuple

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord
from userturn.core.results_reader import Current, decode, parse_record, read_lines


class RecordRef(NamedTuple):
    """Where one current record is and what it is grouped and sorted by."""

    file: int  # index into the files indexed
    offset: int
    number: int  # line number, for messages
    status: str
    fingerprint: str | None
    model: str
    dataset: str
    mode: str
    perturbation: str
    temperature: float
    item_id: str
    sample: int


class RefIndex(NamedTuple):
    """The current records of several files read as one, and whether a torn final line was passed over."""

    files: list[Path]
    refs: list[RecordRef]
    torn_tail: bool


def index_records(files: Sequence[Path]) -> RefIndex:
    """One pass over `files` (their concatenation, in order): a reference per current record. A malformed line is
    a UserError naming file:line, as for every reader."""
    current: Current[RecordRef] = Current()
    torn = False
    for index, path in enumerate(files):
        for line in read_lines(path):
            decoded = decode(path, line, ProbeRecord.model_validate)
            if decoded is None:
                torn = True
                continue
            if not isinstance(decoded, ProbeRecord):
                continue  # a configuration line
            r = decoded
            ref = RecordRef(index, line.offset, line.number, r.status, r.config_fingerprint, r.model, r.dataset,
                            r.mode, r.perturbation, r.temperature, r.item_id, r.sample)
            earlier = current.put(r.key, ref)
            if earlier is not None and earlier.fingerprint != ref.fingerprint and earlier.status == ref.status == "ok":
                raise UserError(f"{path}:{line.number}: record {r.key!r} was made with configuration "
                                f"{ref.fingerprint}, an earlier line of the same key with {earlier.fingerprint}: the "
                                "results read mix two configurations of the same samples; read them apart "
                                "(`userturn report` shows them apart)")
    return RefIndex(list(files), list(current.lines.values()), torn)


class RecordReader:
    """Reads the record a `RecordRef` points at; keeps one open file per results file (close it, or use `with`)."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = list(files)
        self._open: dict[int, IO[bytes]] = {}

    def read(self, ref: RecordRef) -> ProbeRecord:
        fh = self._open.get(ref.file)
        if fh is None:
            try:  # small reads: the lines are taken in group order, not file order
                fh = self._open[ref.file] = self.files[ref.file].open("rb")
            except OSError as exc:
                raise UserError(f"cannot read {self.files[ref.file]}: {exc.strerror or exc}") from None
        fh.seek(ref.offset)
        return parse_record(fh.readline().strip(), self.files[ref.file], ref.number)

    def close(self) -> None:
        for fh in self._open.values():
            fh.close()
        self._open.clear()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
