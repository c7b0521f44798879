"""Saved resume scans: `RESULTS.jsonl.index`, so a resume of a large results file reads only what no scan has read.

Results files are append-only (`userturn.jsonl`: complete lines; a torn tail is only ever cut, never rewritten), so
what a scan found in a range of bytes stays true while those bytes are unchanged. The index file is a chain of
segments, each the scan of one byte range `[start, end)` of the results file (per-key states, configurations,
line counts; msgpack via msgspec), the first starting at 0 and each next one where the previous ended. A segment is
added by a scan that read `MIN_SCANNED_BYTES` or more past the chain (a resume), and by the probe every
`MIN_SCANNED_BYTES` it writes; so a killed run leaves at most that much for its resume to read.
Each segment's body carries a CRC-32, checked before it is decoded.

The index records the results file's device and inode and the SHA-256 of its first 4 KB; each segment the SHA-256
of the 4 KB that end at its `end`. A load uses the longest chain from 0 whose checks all still hold (and whose
format is this version's) and the scan reads on from its end; a replaced, shortened or edited file, or an
unreadable or foreign index, is ignored without a word and the file is scanned from its start. The index is a
cache: deleting it is always safe. A fresh index is written to a temporary file and renamed into place; a segment
is added only after a segment of the chain that ends where it starts (what followed that one, such as a segment
torn by a kill or one whose checksum failed, is cut first).
A failed write (read-only folder, full disk) leaves the index as it was and is not an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec

if TYPE_CHECKING:
    from userturn.resume_index import ResumeIndex

FORMAT = 2
MIN_SCANNED_BYTES = 64 << 20  # a scan of less takes well under a second: not worth a segment
WINDOW = 4096
SUFFIX = ".index"
_LENGTH = 4  # every frame: its length (4 bytes, big-endian), then that many bytes of msgpack


class _FileHeader(msgspec.Struct):
    format: int
    device: int
    inode: int
    head_bytes: int  # min(4 KB, the first segment's end)
    head_sha256: bytes


class _SegmentHead(msgspec.Struct):
    """Checked (and skipped past) without decoding the segment's states."""

    start: int
    end: int  # a line boundary of the results file
    tail_sha256: bytes  # of the 4 KB (or less, near the file's start) ending at `end`
    body_bytes: int
    body_crc32: int  # the body, checked before it is decoded


class _SegmentBody(msgspec.Struct):
    lines: int = 0
    states: dict[str, int] = {}
    configs: dict[str, Any] = {}
    ok_fingerprints: list[str] = []
    unfingerprinted: int = 0
    unfingerprinted_keys: list[str] = []
    old_schema: tuple[int, str] | None = None


_file_header = msgspec.msgpack.Decoder(_FileHeader)
_segment_head = msgspec.msgpack.Decoder(_SegmentHead)
_segment_body = msgspec.msgpack.Decoder(_SegmentBody)
_encoder = msgspec.msgpack.Encoder()


def snapshot_path(results: Path) -> Path:
    return results.with_name(results.name + SUFFIX)


def _sha256(fh: BinaryIO, start: int, end: int) -> bytes:
    fh.seek(start)
    return hashlib.sha256(fh.read(end - start)).digest()


def _tail_sha256(fh: BinaryIO, end: int) -> bytes:
    """SHA-256 of the 4 KB (fewer near the file's start) that end at byte `end`."""
    return _sha256(fh, max(0, end - WINDOW), end)


def _frame(obj: object) -> bytes:
    data = _encoder.encode(obj)
    return len(data).to_bytes(_LENGTH, "big") + data


def _read_frame(saved: BinaryIO) -> bytes | None:
    length = saved.read(_LENGTH)
    if len(length) < _LENGTH:
        return None
    data = saved.read(int.from_bytes(length, "big"))
    return data if len(data) == int.from_bytes(length, "big") else None


def _chain(saved: BinaryIO, fh: BinaryIO) -> list[tuple[_SegmentHead, int]]:
    """The valid chain of the index open as `saved` for the results file open as `fh`: each segment's head and
    the offset of its body in the index file."""
    st = os.fstat(fh.fileno())
    saved_size = os.fstat(saved.fileno()).st_size
    frame = _read_frame(saved)
    if frame is None:
        return []
    header = _file_header.decode(frame)
    if (header.format != FORMAT or (header.device, header.inode) != (st.st_dev, st.st_ino)
            or header.head_bytes > st.st_size or _sha256(fh, 0, header.head_bytes) != header.head_sha256):
        return []
    chain: list[tuple[_SegmentHead, int]] = []
    end = 0
    while (frame := _read_frame(saved)) is not None:
        try:
            head = _segment_head.decode(frame)
        except msgspec.DecodeError:
            break
        body_at = saved.tell()
        if (head.start != end or not head.start < head.end <= st.st_size
                or (not chain and header.head_bytes != min(WINDOW, head.end))
                or _tail_sha256(fh, head.end) != head.tail_sha256):
            break
        if body_at + head.body_bytes > saved_size:  # a segment cut short by a kill
            break
        chain.append((head, body_at))
        end = head.end
        saved.seek(body_at + head.body_bytes)  # past the body, unread
    return chain


def load(results: Path, fh: BinaryIO, into: ResumeIndex) -> int:
    """Fill `into` (empty) from the index beside `results` as far as it still describes the file open as `fh`;
    return the offset the scan goes on from: 0 when there is no usable index, -1 when the index failed part way
    (then `into` holds a partial load and is to be dropped)."""
    covered = 0
    try:
        with snapshot_path(results).open("rb") as saved:
            for head, body_at in _chain(saved, fh):
                saved.seek(body_at)
                data = saved.read(head.body_bytes)
                if zlib.crc32(data) != head.body_crc32:
                    break  # a damaged segment: the chain stops before it
                body = _segment_body.decode(data)
                into.add(body.states, body.configs, body.ok_fingerprints, body.lines, body.unfingerprinted,
                         body.unfingerprinted_keys, body.old_schema)
                covered = head.end
    except (OSError, msgspec.DecodeError):
        return -1 if into.lines else 0
    return covered


def indexed_end(results: Path, fh: BinaryIO) -> int:
    """Where the valid chain of the index beside `results` ends (0 without one); no states are decoded."""
    try:
        with snapshot_path(results).open("rb") as saved:
            chain = _chain(saved, fh)
    except (OSError, msgspec.DecodeError):
        return 0
    return chain[-1][0].end if chain else 0


def _segment(fh: BinaryIO, part: ResumeIndex, start: int, end: int) -> tuple[bytes, bytes]:
    """A segment's head frame and its body (written one after the other: the body can be tens of MB)."""
    body = _encoder.encode(_SegmentBody(
        lines=part.lines, states=part.states, configs=part.configs, ok_fingerprints=list(part.ok_configs),
        unfingerprinted=part.unfingerprinted, unfingerprinted_keys=sorted(part.unfingerprinted_keys),
        old_schema=part.old_schema))
    head = _SegmentHead(start=start, end=end, tail_sha256=_tail_sha256(fh, end),
                        body_bytes=len(body), body_crc32=zlib.crc32(body))
    return _frame(head), body


def add_segment(results: Path, fh: BinaryIO, part: ResumeIndex, start: int, end: int) -> bool:
    """Record `part`, the scan of bytes `[start, end)` of the results file open as `fh`: a fresh index when
    `start` is 0, else after the segment of the index's valid chain that ends at `start` (anything after that one
    is cut). Returns whether it was written."""
    target = snapshot_path(results)
    try:
        head, body = _segment(fh, part, start, end)
        if start == 0:
            st = os.fstat(fh.fileno())
            head_bytes = min(WINDOW, end)
            header = _FileHeader(format=FORMAT, device=st.st_dev, inode=st.st_ino, head_bytes=head_bytes,
                                 head_sha256=_sha256(fh, 0, head_bytes))
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                with tmp.open("wb") as out:
                    out.write(_frame(header) + head)
                    out.write(body)
                os.replace(tmp, target)
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            return True
        with target.open("r+b") as saved:
            ends = {seg.end: body_at + seg.body_bytes for seg, body_at in _chain(saved, fh)}
            if start not in ends:
                return False
            saved.truncate(ends[start])  # what follows: a segment torn by a kill, or one a load found damaged
            saved.seek(ends[start])
            saved.write(head)
            saved.write(body)
        return True
    except (OSError, ValueError, TypeError, msgspec.EncodeError, msgspec.DecodeError):
        return False  # ValueError: a key no UTF-8 can hold
