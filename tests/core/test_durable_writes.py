"""Durable writes: a full disk or an I/O error stops the writer with ResultsWriteError (exit 5), cut back to the
last complete line; no torn line is ever left mid-file. On a real small tmpfs and with injected faults."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_process import QWEN_DIR, assert_one_line_error, probe, write_dataset
from loopback_server import LoopbackServer
from record_factory import make_record

from userturn.core import jsonl
from userturn.core.jsonl import JsonlWriter, read_records
from userturn.core.records import ProbeRecord
from userturn.core.results_lock import ResultsWriteError

REAL_WRITE = os.write
PAGE = 4096  # tmpfs hands out space in pages; the lock sidecar takes one


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted for this test (needs root and the mount capability; skipped without them)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path, leave: int) -> Path:
    """Take all but about `leave` bytes of the file system's free space with a filler file."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    filler = directory / "filler"
    filler.write_bytes(b"\0" * max(0, free - leave))
    return filler


def assert_only_complete_lines(path: Path) -> list[ProbeRecord]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-80:]
    return [ProbeRecord.model_validate_json(line) for line in data.splitlines()]


def test_disk_full_stops_the_writer_and_keeps_complete_lines(small_fs: Path) -> None:
    path = small_fs / "out.jsonl"
    filler = fill(small_fs, 4 * PAGE)
    writer = JsonlWriter(path)
    written = 0
    with pytest.raises(ResultsWriteError, match=r"cannot write .*out\.jsonl: No space left on device; the complete "
                                                r"records before it are kept"):
        for i in range(1000):
            writer.write(make_record(i, user_turn="x" * 500))
            written += 1
    assert 0 < written < 1000
    kept = assert_only_complete_lines(path)
    assert [r.item_id for r in kept] == [str(i) for i in range(written)]
    with pytest.raises(ResultsWriteError):  # every later write fails too: nothing is claimed past the loss
        writer.write(make_record("later"))
    with pytest.raises(ResultsWriteError):
        writer.close()

    filler.unlink()  # space returns: the next writer appends after the last complete line
    with JsonlWriter(path) as again:
        again.write(make_record("after"))
    records = assert_only_complete_lines(path)
    assert [r.item_id for r in records] == [*(str(i) for i in range(written)), "after"]


def test_disk_full_in_per_tick_mode_is_raised_to_the_run(small_fs: Path) -> None:
    path = small_fs / "out.jsonl"
    fill(small_fs, 5 * PAGE)

    async def run() -> int:
        writer = JsonlWriter(path, per_tick=True)
        queued = 0
        try:
            for i in range(1000):
                writer.write(make_record(i, user_turn="y" * 300))  # a flush failure surfaces here ...
                queued += 1
                if i % 5 == 4:
                    await asyncio.sleep(0)  # ... after the loop ran the batched flush
        finally:
            with contextlib.suppress(ResultsWriteError):
                writer.close()
        return queued

    with pytest.raises(ResultsWriteError, match="No space left on device"):
        asyncio.run(run())
    kept = assert_only_complete_lines(path)
    assert 0 < len(kept) < 1000
    assert [r.item_id for r in kept] == [str(i) for i in range(len(kept))]


def test_final_flush_failure_is_raised_by_close(small_fs: Path) -> None:
    path = small_fs / "out.jsonl"
    fill(small_fs, 2 * PAGE)

    async def run() -> None:
        writer = JsonlWriter(path, per_tick=True)
        for i in range(50):
            writer.write(make_record(i, user_turn="z" * 200))
        writer.close()  # the batch has not been flushed yet: close writes it, fails, and says so

    with pytest.raises(ResultsWriteError):
        asyncio.run(run())
    assert_only_complete_lines(path)


class ShortThenFail:
    """os.write stand-in: the first call writes only part of its data, the second fails with `error`."""

    def __init__(self, error: int = errno.EIO, short: int = 100) -> None:
        self.calls = 0
        self.error = error
        self.short = short

    def __call__(self, fd: int, data: object) -> int:
        self.calls += 1
        if self.calls == 1:
            return REAL_WRITE(fd, bytes(data)[: self.short])  # type: ignore[call-overload]
        raise OSError(self.error, os.strerror(self.error))


def test_short_write_then_io_error_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(make_record(1))
    before = path.read_bytes()
    writer = JsonlWriter(path)
    monkeypatch.setattr(jsonl.os, "write", ShortThenFail())
    with pytest.raises(ResultsWriteError, match=r"Input/output error"):
        writer.write(make_record(2))
    monkeypatch.undo()
    assert path.read_bytes() == before  # the 100 bytes of the cut line are gone
    with pytest.raises(ResultsWriteError):
        writer.close()


def test_partial_batch_keeps_its_complete_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.jsonl"
    lines = [jsonl._to_json(make_record(i)) + b"\n" for i in range(3)]
    fault = ShortThenFail(errno.ENOSPC, short=len(lines[0]) + len(lines[1]) + 10)

    async def run() -> None:
        writer = JsonlWriter(path, per_tick=True)
        monkeypatch.setattr(jsonl.os, "write", fault)
        for line in lines:
            writer.write_line(line)
        await asyncio.sleep(0)  # the batched flush: 2 lines and 10 bytes get through, then ENOSPC
        monkeypatch.undo()
        with pytest.raises(ResultsWriteError, match="No space left on device"):
            writer.write_line(lines[0])
        with pytest.raises(ResultsWriteError):
            writer.close()

    asyncio.run(run())
    assert path.read_bytes() == lines[0] + lines[1]


def test_fsync_error_on_close_is_a_write_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.jsonl"
    writer = JsonlWriter(path)
    writer.write(make_record(1))

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(jsonl.os, "fsync", failing_fsync)
    with pytest.raises(ResultsWriteError, match="Input/output error"):
        writer.close()


def test_unwritable_location_is_a_write_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ResultsWriteError, match=r"a-file"):
        JsonlWriter(blocker / "out.jsonl")  # its folder would have to be a file


def test_records_in_a_file_that_survived_a_full_disk_read_back(small_fs: Path) -> None:
    path = small_fs / f"{uuid.uuid4().hex}.jsonl"
    fill(small_fs, 4 * PAGE)
    writer = JsonlWriter(path)
    with pytest.raises(ResultsWriteError):
        for i in range(1000):
            writer.write(make_record(i, user_turn="w" * 400))
    records, report = read_records(path)  # strict: would raise on a torn line in the middle
    assert records and not report.torn_tail


@pytest.mark.slow
def test_probe_on_a_full_disk_exits_5_and_resumes_when_space_returns(tmp_path: Path, small_fs: Path) -> None:
    data = write_dataset(tmp_path / "data.jsonl", 200)
    out = small_fs / "out.jsonl"
    filler = fill(small_fs, 10 * PAGE)
    with LoopbackServer() as server:
        args = ["--base-url", server.base_url, "--model", "loopback", "--dataset", str(data), "--out", str(out),
                "--tokenizer", QWEN_DIR, "--concurrency", "4", "--no-progress"]
        full = probe(*args)
        assert_one_line_error(full, 5, f"cannot write {out}: No space left on device")
        assert "wrote" not in full.stderr  # no claimed success
        kept, report = read_records(out)  # strict: no torn line anywhere
        assert 0 < len(kept) < 200 and not report.torn_tail
        assert out.read_bytes().endswith(b"\n")
        filler.unlink()
        subprocess.run(["mount", "-o", "remount,size=2m", str(small_fs)], check=True)
        resumed = probe(*args)
        assert resumed.returncode == 0, resumed.stderr
        assert f"already done {len(kept)})" in resumed.stderr
    records, report = read_records(out)
    assert len(records) == 200 and report.lines == 200 and all(r.status == "ok" for r in records.values())
