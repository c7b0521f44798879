"""userturn/resume_snapshot.py: the index of saved scans is used only for the same, only appended-to file, as far
as it still describes it, and a scan from it agrees with a full scan."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from test_jsonl import line_of, make_record
from test_resume_index import with_fields

from userturn import resume_snapshot
from userturn.resume_index import ResumeIndex, extend_snapshot, scan_results
from userturn.resume_snapshot import snapshot_path

FIELDS = ("states", "configs", "ok_configs", "unfingerprinted", "unfingerprinted_keys", "old_schema",
          "assistant_turns", "lines", "torn_tail", "covered")


def same(a: ResumeIndex, b: ResumeIndex) -> None:
    for name in FIELDS:
        assert getattr(a, name) == getattr(b, name), name
    assert list(a.states) == list(b.states)  # and in the same order


def lines(rng: random.Random, count: int, start: int = 0) -> bytes:
    out = []
    for n in range(start, start + count):
        item = rng.randrange(40)
        ok = rng.random() < 0.7
        record = make_record(item, sample=rng.randrange(3), user_turn=f"turn {n}" if ok else None,
                             status="ok" if ok else "error", error=None if ok else "HTTP 503")
        fields: dict[str, object] = {"judge_status": rng.choice([None, "ok", "error"])}
        if rng.random() < 0.8:
            fields.update(config_fingerprint=f"{rng.randrange(3):016x}", config={"max_tokens": rng.randrange(3)})
        if rng.random() < 0.1:
            fields.update(assistant_source="model", meta={"assistant_turn": f"answer {item}"})
        out.append(with_fields(line_of(record), **fields))
    return b"".join(out)


def scanned_from(path: Path) -> int:
    """Scan `path` as a resume does, check it finds what a full scan finds, and return where it began reading."""
    index = scan_results(path)
    same(index, scan_results(path, snapshot=False))
    return index.read_from


def two_segments(path: Path, rng: random.Random) -> int:
    """Append 80 records to `path` in two halves, the index extended after each; return where the first ends."""
    append(path, lines(rng, 40))
    extend_snapshot(path)
    first_end = path.stat().st_size
    append(path, lines(rng, 40, start=40))
    extend_snapshot(path)
    return first_end


def append(path: Path, data: bytes) -> int:
    """Append `data` to `path` (created if need be); return the file's size before it."""
    size = path.stat().st_size if path.exists() else 0
    with path.open("ab") as fh:
        fh.write(data)
    return size


@pytest.fixture
def small_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resume_snapshot, "MIN_SCANNED_BYTES", 2000)


@pytest.mark.usefixtures("small_snapshots")
def test_each_scan_reads_only_what_the_index_lacks_and_agrees_with_a_full_scan(tmp_path: Path) -> None:
    rng = random.Random(1)
    path = tmp_path / "out.jsonl"
    path.write_bytes(lines(rng, 60))
    first = scan_results(path)
    assert snapshot_path(path).exists() and first.snapshot_covered == path.stat().st_size
    ends = [first.covered]
    for n in range(3):  # three more segments, chained
        append(path, lines(rng, 30, start=60 + 30 * n))
        again = scan_results(path)
        assert again.read_from == ends[-1]  # started where the index ended ...
        same(again, scan_results(path, snapshot=False))  # ... and found what a full scan finds
        ends.append(again.snapshot_covered)
    assert again.lines == 150 and again.duplicates > 0 and ends[-1] == path.stat().st_size


def test_a_scan_for_assistant_turns_reads_the_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resume_snapshot, "MIN_SCANNED_BYTES", 2000)
    path = tmp_path / "out.jsonl"
    path.write_bytes(lines(random.Random(2), 60))
    scan_results(path)
    turns = scan_results(path, assistant_turns=True)
    assert turns.read_from == 0 and turns.assistant_turns
    same(turns, scan_results(path, assistant_turns=True, snapshot=False))


@pytest.mark.usefixtures("small_snapshots")
def test_small_files_get_no_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resume_snapshot, "MIN_SCANNED_BYTES", 10**9)
    path = tmp_path / "out.jsonl"
    path.write_bytes(lines(random.Random(1), 20))
    scan_results(path)
    assert not snapshot_path(path).exists()


@pytest.mark.usefixtures("small_snapshots")
@pytest.mark.parametrize("change", ["replaced", "shortened", "edited_before_end", "edited_head", "garbage",
                                    "truncated_snapshot", "other_format"])
def test_a_snapshot_that_no_longer_describes_the_file_is_ignored(tmp_path: Path, change: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(change)
    path = tmp_path / "out.jsonl"
    data = lines(rng, 60)
    path.write_bytes(data)
    scan_results(path)
    saved = snapshot_path(path)
    assert saved.exists()
    if change == "replaced":  # same bytes, another file (a copy put in its place)
        fresh = tmp_path / "fresh.jsonl"
        fresh.write_bytes(data)
        os.replace(fresh, path)
    elif change == "shortened":
        path.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 1])
    elif change in ("edited_before_end", "edited_head"):  # same size, same inode, one byte changed
        at = len(data) - 10 if change == "edited_before_end" else 30
        with path.open("r+b") as fh:
            fh.seek(at)
            fh.write(b"X" if data[at:at + 1] != b"X" else b"Y")
    elif change == "garbage":
        saved.write_bytes(b"\x00\x00\x00\x05hello")
    elif change == "truncated_snapshot":
        saved.write_bytes(saved.read_bytes()[:-100])
    elif change == "other_format":
        monkeypatch.setattr(resume_snapshot, "FORMAT", resume_snapshot.FORMAT + 1)
    index = scan_results(path)
    assert index.read_from == 0  # read from the start (and indexed anew)
    same(index, scan_results(path, snapshot=False))
    assert scan_results(path).read_from == index.covered


@pytest.mark.usefixtures("small_snapshots")
def test_the_index_covers_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    data = lines(random.Random(3), 60)
    last_line = line_of(make_record("last"))
    path.write_bytes(data + last_line[:-1])  # a complete record without its newline: counted, not covered
    index = scan_results(path)
    assert index.is_ok(make_record("last").key) and index.covered == len(data) == index.snapshot_covered
    append(path, b"\n")  # the next writer adds the newline
    again = scan_results(path)
    assert again.read_from == len(data)
    same(again, scan_results(path, snapshot=False))
    assert again.lines == index.lines  # the last line counted once


@pytest.mark.usefixtures("small_snapshots")
def test_extend_indexes_only_what_was_appended_and_a_later_part_of_the_chain_can_fail_alone(tmp_path: Path) -> None:
    rng = random.Random(5)
    path = tmp_path / "out.jsonl"
    path.write_bytes(lines(rng, 1))
    extend_snapshot(path)
    assert not snapshot_path(path).exists()  # under the threshold: nothing yet
    first_end = two_segments(path, rng)  # the first segment from 0, the second from where the first ended
    assert scanned_from(path) == path.stat().st_size
    saved = snapshot_path(path).read_bytes()
    snapshot_path(path).write_bytes(saved[:-7])  # the second segment torn, as by a kill while it was written
    assert scanned_from(path) == first_end  # the first still holds
    damaged = bytearray(saved)
    damaged[-20] ^= 0xFF  # a flipped byte inside the second segment's body
    snapshot_path(path).write_bytes(bytes(damaged))
    assert scanned_from(path) == first_end  # the chain stops before the damaged segment ...
    assert scan_results(path).read_from == path.stat().st_size  # ... which that scan replaced
    snapshot_path(path).write_bytes(saved[:-7])
    append(path, lines(rng, 5, start=81))
    extend_snapshot(path)  # cuts the torn segment and adds one from the first's end
    assert scan_results(path).read_from == path.stat().st_size


@pytest.mark.usefixtures("small_snapshots")
def test_a_snapshot_that_cannot_be_written_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(lines(random.Random(7), 60))
    snapshot_path(path).mkdir()  # in its way (works as root too, unlike a read-only folder)
    index = scan_results(path)
    assert index.snapshot_covered == 0 and index.lines == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, snapshot_path(path).name])  # no temp


@pytest.mark.usefixtures("small_snapshots")
def test_a_segment_that_does_not_start_where_the_previous_ended_ends_the_chain(tmp_path: Path) -> None:
    import io

    import msgspec

    path = tmp_path / "out.jsonl"
    first_end = two_segments(path, random.Random(9))
    saved = io.BytesIO(snapshot_path(path).read_bytes())
    header = resume_snapshot._read_frame(saved)
    frames = []
    while (frame := resume_snapshot._read_frame(saved)) is not None:
        head = resume_snapshot._segment_head.decode(frame)
        frames.append((head, saved.read(head.body_bytes)))
    assert header is not None and [h.start for h, _ in frames] == [0, first_end]
    second = frames[1][0]
    shifted = msgspec.structs.replace(second, start=second.start - 1)  # a gap of -1 byte: not contiguous
    snapshot_path(path).write_bytes(resume_snapshot._frame(resume_snapshot._file_header.decode(header))
                                    + resume_snapshot._frame(frames[0][0]) + frames[0][1]
                                    + resume_snapshot._frame(shifted) + frames[1][1])
    assert scanned_from(path) == first_end
