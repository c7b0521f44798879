"""What a resume needs from a results file, read in one streaming pass without building records.

`scan_results(path)` decodes only `key`, `status`, `judge_status`, `item_id`, `config_fingerprint` (and, for a
new fingerprint, its `config`; on request, the model's own assistant turn in `meta`) with msgspec, which skips
every other field without materialising it. The file is read in large blocks and each block is decoded as JSON
lines at once; a block that fails is decoded again line by line to name the bad line. The last line for a key
wins. A final line without a newline that does not decode is a torn write (reported, not an error); any other
line that does not decode is a UserError naming file:line.

Memory is one small int per key plus the key itself (about 150 bytes a record): 1,000,000 records in ~150 MB.

A scan that read 64 MB or more past the index beside the file (`userturn.resume_snapshot`, `RESULTS.jsonl.index`)
adds what it read to it, and the probe adds every 64 MB it writes (`extend_snapshot`); the next scan of the same,
only appended-to file loads the index and reads only the bytes after it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import msgspec

from userturn import resume_snapshot
from userturn.errors import UserError
from userturn.records import KEY_FORMAT_SINCE

BLOCK_BYTES = 2 << 20  # 8 MB blocks scan no faster, and leave ~20 MB more resident

# Per-key state, packed into one small int.
_OK = 1
_JUDGE_OK = 2
_JUDGE_ERROR = 4
_STATE = {(status, judge): (_OK if status == "ok" else 0) | {"ok": _JUDGE_OK, "error": _JUDGE_ERROR, None: 0}[judge]
          for status in ("ok", "error") for judge in ("ok", "error", None)}


_NULL = msgspec.Raw(b"null")


class _Line(msgspec.Struct, gc=False):
    """The fields of a `ProbeRecord` line a resume looks at; every other field is skipped by the decoder."""

    key: str
    status: Literal["ok", "error"]
    schema_version: int = 1
    item_id: str | None = None
    judge_status: Literal["ok", "error"] | None = None
    config_fingerprint: str | None = None
    config: msgspec.Raw = _NULL  # the raw JSON, decoded only for a fingerprint not seen before
    assistant_source: str | None = None
    meta: msgspec.Raw = _NULL


class _Meta(msgspec.Struct):
    assistant_turn: str | None = None


_line_decoder = msgspec.json.Decoder(_Line)
_config_decoder = msgspec.json.Decoder(dict | None)
_meta_decoder = msgspec.json.Decoder(_Meta | None)


@dataclass
class ResumeIndex:
    """Last state per key of a results file, the distinct run configurations in it, and what the scan found."""

    states: dict[str, int] = field(default_factory=dict)
    configs: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # config_fingerprint -> config (first seen)
    ok_configs: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # the same, over ok lines only
    unfingerprinted: int = 0  # records without a config_fingerprint (files from before it existed)
    unfingerprinted_keys: set[str] = field(default_factory=set)  # ok records without one (their keys)
    old_schema: tuple[int, str] | None = None  # (schema_version, key) of the first record in the pre-2 key format
    assistant_turns: dict[str, str] = field(default_factory=dict)  # item_id -> the model's own answer
    lines: int = 0
    torn_tail: bool = False
    covered: int = 0  # bytes of complete lines read (a line boundary): where a later scan of the file goes on
    read_from: int = 0  # where the scan began reading: the end of the index it loaded, or 0
    snapshot_covered: int = 0  # the bytes the index beside the file describes (loaded or added by this scan)

    @property
    def duplicates(self) -> int:
        """Lines that repeat a key seen earlier (the later line wins)."""
        return self.lines - len(self.states)

    def __len__(self) -> int:
        return len(self.states)

    def __contains__(self, key: object) -> bool:
        return key in self.states

    def status(self, key: str) -> Literal["ok", "error"] | None:
        state = self.states.get(key)
        if state is None:
            return None
        return "ok" if state & _OK else "error"

    def is_ok(self, key: str) -> bool:
        return bool(self.states.get(key, 0) & _OK)

    def judge_status(self, key: str) -> Literal["ok", "error"] | None:
        state = self.states.get(key, 0)
        if state & _JUDGE_OK:
            return "ok"
        return "error" if state & _JUDGE_ERROR else None

    def pending(self, keys: list[str]) -> list[int]:
        """Positions of the `keys` not yet ok (the probe's per-item check, kept to one comprehension)."""
        get = self.states.get
        return [i for i, key in enumerate(keys) if not get(key, 0) & _OK]

    def ok_keys(self) -> Iterator[str]:
        return (key for key, state in self.states.items() if state & _OK)

    def absorb(self, later: ResumeIndex) -> None:
        """Add what a scan of the bytes after this index's found (its states win; first configurations stay)."""
        self.add(later.states, later.configs, list(later.ok_configs), later.lines, later.unfingerprinted,
                 later.unfingerprinted_keys, later.old_schema)

    def add(self, states: dict[str, int], configs: dict[str, dict[str, Any] | None], ok_fingerprints: list[str],
            lines: int, unfingerprinted: int, unfingerprinted_keys: Collection[str],
            old_schema: tuple[int, str] | None) -> None:
        """`absorb` from parts (a saved segment): what one scan of a later byte range found."""
        if self.states:
            self.states.update(states)
        else:
            self.states = states  # the first part: taken as it is, not copied
        for fingerprint, config in configs.items():
            self.configs.setdefault(fingerprint, config)
        for fingerprint in ok_fingerprints:
            self.ok_configs.setdefault(fingerprint, self.configs[fingerprint])
        self.lines += lines
        self.unfingerprinted += unfingerprinted
        self.unfingerprinted_keys.update(unfingerprinted_keys)
        if self.old_schema is None:
            self.old_schema = old_schema


def scan_results(path: str | Path, *, assistant_turns: bool = False, snapshot: bool = True) -> ResumeIndex:
    """Stream `path` into a ResumeIndex (empty if the file does not exist). `assistant_turns` also collects, per
    item, the first model-generated assistant turn (`meta.assistant_turn` of records with assistant_source
    "model"), which `--assistant-from model` reuses (such a scan reads the whole file: the index has no turns).

    With `snapshot` (the default), the index beside the file supplies the bytes it covers, and a scan that read
    `resume_snapshot.MIN_SCANNED_BYTES` or more past it adds what it read to the index."""
    path = Path(path)
    index = ResumeIndex()
    snapshot = snapshot and not assistant_turns
    if not path.exists():
        return index
    try:
        fh = path.open("rb", buffering=0)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        start = resume_snapshot.load(path, fh, index) if snapshot else 0
        if start < 0:  # an index that failed part way: scan it all
            index, start = ResumeIndex(), 0
        index.read_from = index.snapshot_covered = start
        part = index if start == 0 else ResumeIndex()  # what the scan reads, kept apart to be indexed alone
        pending = _scan(part, path, fh, start, assistant_turns)
        if snapshot and part.covered - start >= resume_snapshot.MIN_SCANNED_BYTES \
                and resume_snapshot.add_segment(path, fh, part, start, part.covered):
            index.snapshot_covered = part.covered
        if part is not index:
            index.absorb(part)
        index.covered = part.covered
        if pending.strip():
            try:
                _add_lines(index, path, pending, index.covered, assistant_turns, final=True)
            except UserError:
                index.torn_tail = True  # a write cut short; the next writer cuts it
    return index


def _scan(index: ResumeIndex, path: Path, fh: BinaryIO, start: int, collect: bool) -> bytes:
    """Add the complete lines of `fh` from byte `start` on to `index` (setting `covered`, the offset after the last
    one); return what follows the last newline (a torn write, or a last record without its newline)."""
    fh.seek(start)
    offset = start  # file offset of the first byte of `pending`
    pending = b""  # the start of a line that continues in the next block
    while block := fh.read(BLOCK_BYTES):
        first = block.find(b"\n") + 1
        if first == 0:
            pending += block
            continue
        if pending:  # the line that straddles two blocks, completed
            _add_lines(index, path, pending + block[:first], offset, collect)
            offset += len(pending)
            pending = b""
        else:
            _add_lines(index, path, memoryview(block)[:first], offset, collect)
        last = block.rfind(b"\n") + 1
        if last > first:
            _add_lines(index, path, memoryview(block)[first:last], offset + first, collect)
        pending = block[last:]
        offset += last
    index.covered = offset
    return pending


def extend_snapshot(path: str | Path) -> None:
    """Add to the index beside `path` the scan of what was appended past it, when that is
    `resume_snapshot.MIN_SCANNED_BYTES` or more (a `stat`, and a read of the index's segment heads, otherwise).
    The probe calls it while it writes and when it stops: memory is that of the bytes read, not of the file."""
    path = Path(path)
    with contextlib.suppress(OSError, UserError), path.open("rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < resume_snapshot.MIN_SCANNED_BYTES:
            return
        start = resume_snapshot.indexed_end(path, fh)
        if size - start < resume_snapshot.MIN_SCANNED_BYTES:
            return
        part = ResumeIndex()
        _scan(part, path, fh, start, False)
        resume_snapshot.add_segment(path, fh, part, start, part.covered)


def _add_lines(index: ResumeIndex, path: Path, body: bytes | memoryview, offset: int, assistant_turns: bool,
               final: bool = False) -> None:
    """Decode a run of complete lines (a final line may lack its newline) and add them to the index."""
    try:
        lines = _line_decoder.decode_lines(body)
    except msgspec.DecodeError:
        if final:
            raise UserError("torn") from None
        _raise_for_bad_line(path, bytes(body), offset)
    index.lines += len(lines)
    # The hot loop, kept to one comprehension: a million lines pass through here.
    index.states.update([(line.key, _STATE[line.status, line.judge_status]) for line in lines])
    if index.old_schema is None and lines and min({line.schema_version for line in lines}) < KEY_FORMAT_SINCE:
        old = next(line for line in lines if line.schema_version < KEY_FORMAT_SINCE)
        index.old_schema = (old.schema_version, old.key)
    fingerprint_list = [line.config_fingerprint for line in lines]
    fingerprints = set(fingerprint_list)
    if None in fingerprints:
        index.unfingerprinted += fingerprint_list.count(None)
        index.unfingerprinted_keys.update(line.key for line in lines
                                          if line.config_fingerprint is None and line.status == "ok")
        fingerprints.discard(None)
    if not fingerprints <= index.ok_configs.keys():
        for line in lines:  # the first line of each fingerprint not seen before
            fingerprint = line.config_fingerprint
            if fingerprint is None or fingerprint in index.ok_configs:
                continue
            if fingerprint not in index.configs:
                index.configs[fingerprint] = _config_decoder.decode(line.config)
            if line.status == "ok":
                index.ok_configs[fingerprint] = index.configs[fingerprint]
    if assistant_turns:
        for line in lines:
            if line.assistant_source == "model":
                _add_assistant_turn(index, line)


def _raise_for_bad_line(path: Path, body: bytes, offset: int) -> None:
    """Name the first line of `body` (which starts at byte `offset` of the file) that does not decode."""
    with path.open("rb") as fh:
        number = 1 + sum(chunk.count(b"\n") for chunk in _chunks(fh, offset))
    for raw in body.split(b"\n"):
        if raw.strip():
            try:
                _line_decoder.decode(raw)
            except msgspec.DecodeError as exc:
                raise UserError(f"{path}:{number}: not a userturn record ({exc})") from None
        number += 1
    raise AssertionError("a block failed to decode but each of its lines decodes")


def _chunks(fh: BinaryIO, size: int) -> Iterator[bytes]:
    while size > 0 and (chunk := fh.read(min(size, BLOCK_BYTES))):
        size -= len(chunk)
        yield chunk


def _add_assistant_turn(index: ResumeIndex, line: _Line) -> None:
    if line.item_id is None or line.item_id in index.assistant_turns:
        return
    try:
        meta = _meta_decoder.decode(line.meta)
    except msgspec.DecodeError:  # not an object, or a non-string turn: nothing to reuse
        return
    if meta is not None and meta.assistant_turn is not None:
        index.assistant_turns[line.item_id] = meta.assistant_turn
