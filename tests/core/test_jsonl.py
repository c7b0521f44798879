"""userturn/core/jsonl.py: complete-line appends, torn-tail repair, last-per-key reading, SIGKILL safety."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from record_factory import line_of, make_record

from userturn.core.errors import UserError
from userturn.core.jsonl import JsonlWriter, read_records
from userturn.core.records import ProbeRecord

REPO = Path(__file__).resolve().parents[2]






def test_writer_writes_one_complete_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "out.jsonl"
    records = [make_record(i, user_turn=f"turn {i} ✓ «ü»") for i in range(5)]
    with JsonlWriter(path) as writer:
        for record in records:
            writer.write(record)
        assert writer.written == 5
    data = path.read_bytes()
    assert data.endswith(b"\n")
    lines = data.splitlines()
    assert len(lines) == 5
    assert [ProbeRecord.model_validate_json(line) for line in lines] == records


def test_writer_is_visible_before_close(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    writer = JsonlWriter(path)
    writer.write(make_record(1))
    assert path.read_bytes().count(b"\n") == 1  # unbuffered: reached the kernel already
    writer.close()
    writer.close()  # idempotent


def test_writer_appends_to_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(make_record(1))
    with JsonlWriter(path) as writer:
        writer.write(make_record(2))
    records, report = read_records(path)
    assert list(records) == [make_record(1).key, make_record(2).key]
    assert report.lines == 2


def test_torn_tail_is_cut_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    good = line_of(make_record(1)) + line_of(make_record(2))
    path.write_bytes(good + line_of(make_record(3))[:40])
    with JsonlWriter(path) as writer:
        assert path.read_bytes() == good
        writer.write(make_record(4))
    records, report = read_records(path)
    assert sorted(r.item_id for r in records.values()) == ["1", "2", "4"]
    assert not report.torn_tail


def test_torn_only_line_is_cut_to_empty(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"key": "m|d|1')
    JsonlWriter(path).close()
    assert path.read_bytes() == b""


def test_torn_tail_longer_than_one_read_block(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    good = line_of(make_record(1))
    huge = line_of(make_record(2, user_turn="y" * 300_000))
    path.write_bytes(good + huge[:-1000])
    JsonlWriter(path).close()
    assert path.read_bytes() == good


def test_complete_file_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    content = line_of(make_record(1)) + line_of(make_record(2))
    path.write_bytes(content)
    JsonlWriter(path).close()
    assert path.read_bytes() == content


def test_read_keeps_last_record_per_key(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    first = make_record(1, status="error", user_turn=None, error="HTTP 503")
    retry = make_record(1, user_turn="second try")
    other = make_record(2)
    path.write_bytes(line_of(first) + b"\n   \n" + line_of(other) + line_of(retry))
    records, report = read_records(path)
    assert records == {retry.key: retry, other.key: other}
    assert report.duplicates == 1
    assert report.lines == 3  # blank lines are not counted
    assert not report.torn_tail


def test_read_reports_and_ignores_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(line_of(make_record(1)) + line_of(make_record(2))[:-30])
    records, report = read_records(path)
    assert list(records) == [make_record(1).key]
    assert report.torn_tail


def test_read_torn_tail_cut_inside_a_multibyte_character(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    line = line_of(make_record(2, user_turn="ééééééééé"))
    cut = line.index("é".encode()) + 1
    path.write_bytes(line_of(make_record(1)) + line[:cut])
    records, report = read_records(path)
    assert len(records) == 1
    assert report.torn_tail


def test_read_missing_file_is_empty(tmp_path: Path) -> None:
    records, report = read_records(tmp_path / "nope.jsonl")
    assert records == {}
    assert report.lines == 0


def test_malformed_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(line_of(make_record(1)) + b"{not json\n" + line_of(make_record(3)))
    with pytest.raises(UserError) as info:
        read_records(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: not a userturn record")
    assert "\n" not in message


def test_invalid_record_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    bad = make_record(2).model_dump(mode="json")
    del bad["status"]
    path.write_bytes(line_of(make_record(1)) + json.dumps(bad).encode() + b"\n")
    with pytest.raises(UserError,
                       match=rf"^{path}:2: not a userturn record \(status: Field required\); the line is damaged"):
        read_records(path)


def test_reader_and_writer_agree_on_a_record_missing_only_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(line_of(make_record(1)) + line_of(make_record(2))[:-1])
    before, _ = read_records(path)  # what a resume treats as done
    JsonlWriter(path).close()  # what the resumed run does next
    after, _ = read_records(path)
    assert set(after) == set(before)


WRITER_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord, record_key
writer = JsonlWriter(sys.argv[1])
i = 0
while True:
    writer.write(ProbeRecord(key=record_key("m", "d", str(i), "none", 1.0, 0), model="m", dataset="d",
                             item_id=str(i), temperature=1.0, sample=0, seed=0, status="ok",
                             user_turn="x" * (i % 7 * 40_000)))
    i += 1
"""


@pytest.mark.slow
@pytest.mark.parametrize("run", range(3))
def test_sigkill_during_writes_leaves_a_readable_appendable_file(tmp_path: Path, run: int) -> None:
    path = tmp_path / "out.jsonl"
    script = WRITER_SCRIPT.format(repo=str(REPO))
    process = subprocess.Popen([sys.executable, "-c", script, str(path)])
    try:
        deadline = time.monotonic() + 20
        while (not path.exists() or path.stat().st_size < 1_000_000) and time.monotonic() < deadline:
            assert process.poll() is None, "writer died on its own"
            time.sleep(0.01)
        time.sleep(random.uniform(0, 0.2))
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL

    records, report = read_records(path)  # no UserError: at most the final line is torn
    assert records
    assert report.lines - report.duplicates == len(records)  # `lines`: record lines read (not the torn one)
    assert sorted(int(r.item_id) for r in records.values()) == list(range(len(records)))

    with JsonlWriter(path) as writer:
        writer.write(make_record("after-kill"))
    data = path.read_bytes()
    assert data.endswith(b"\n")
    lines = data.splitlines()
    assert all(ProbeRecord.model_validate_json(line) for line in lines)  # every line complete and valid
    assert ProbeRecord.model_validate_json(lines[-1]).item_id == "after-kill"
    again, report = read_records(path)
    assert len(again) == len(records) + 1
    assert not report.torn_tail


def test_a_writer_that_wrote_nothing_leaves_no_file_it_created(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    JsonlWriter(path).close()
    assert not path.exists()  # a run that wrote nothing leaves no empty results file
    path.write_bytes(b"")
    JsonlWriter(path).close()
    assert path.exists()  # a file that was there before is the user's: kept, even empty
    path.unlink()
    with JsonlWriter(path) as writer:
        writer.write(make_record(1))
    assert read_records(path)[0].keys() == {make_record(1).key}
