"""client/resume_index.py: the streaming resume scan agrees with read_records, across block boundaries."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_jsonl import line_of, make_record

from userturn import resume_index
from userturn.errors import UserError
from userturn.jsonl import read_records
from userturn.resume_index import scan_results


def with_fields(record_line: bytes, **fields: object) -> bytes:
    obj = json.loads(record_line)
    obj.update(fields)
    return json.dumps(obj).encode() + b"\n"


def test_last_line_per_key_wins(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    error = make_record(1, status="error", user_turn=None, error="HTTP 503")
    ok = make_record(1)
    later_error = make_record(2, status="error", user_turn=None, error="timeout")
    path.write_bytes(line_of(error) + line_of(ok) + line_of(make_record(2)) + b"\n  \n" + line_of(later_error))
    index = scan_results(path)
    assert index.status(ok.key) == "ok" and index.is_ok(ok.key)
    assert index.status(later_error.key) == "error" and not index.is_ok(later_error.key)
    assert index.status("nope") is None and "nope" not in index
    assert list(index.ok_keys()) == [ok.key]
    assert (index.lines, index.duplicates, len(index)) == (4, 2, 2)


def test_judge_status_configs_and_assistant_turns(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    config_a, config_b = {"max_tokens": 256, "top_p": None}, {"max_tokens": 512}
    lines = [
        with_fields(line_of(make_record(1)), judge_status="error", config_fingerprint="a" * 16, config=config_a),
        with_fields(line_of(make_record(1)), judge_status="ok", config_fingerprint="a" * 16, config={"other": 1}),
        with_fields(line_of(make_record(2)), config_fingerprint="b" * 16, config=config_b,
                    assistant_source="model", meta={"assistant_turn": "It is 4."}),
        with_fields(line_of(make_record(3)), assistant_source="model", meta={"assistant_turn": 5}),
        with_fields(line_of(make_record(2, sample=1)), assistant_source="model", meta={"assistant_turn": "Later."}),
        line_of(make_record(4)),
    ]
    path.write_bytes(b"".join(lines))
    index = scan_results(path, assistant_turns=True)
    assert index.judge_status(make_record(1).key) == "ok"  # the last line's
    assert index.judge_status(make_record(2).key) is None
    assert index.configs == {"a" * 16: config_a, "b" * 16: config_b}  # first config per fingerprint
    assert index.unfingerprinted == 3
    assert index.assistant_turns == {"2": "It is 4."}  # the first per item; a non-string one is not reused
    assert scan_results(path).assistant_turns == {}


def test_torn_tail_is_reported_and_a_complete_last_line_counts(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(line_of(make_record(1)) + line_of(make_record(2))[:-40])
    index = scan_results(path)
    assert index.torn_tail and list(index.states) == [make_record(1).key]
    path.write_bytes(line_of(make_record(1)) + line_of(make_record(2))[:-1])
    index = scan_results(path)
    assert not index.torn_tail and len(index) == 2


@pytest.mark.parametrize("block", [64, 1000, 1 << 20])
def test_bad_line_is_named_by_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(resume_index, "BLOCK_BYTES", block)
    path = tmp_path / "out.jsonl"
    good = [line_of(make_record(i)) for i in range(6)]
    path.write_bytes(b"".join(good[:4]) + b"\n" + b'{"key": "k", "status": "maybe"}\n' + b"".join(good[4:]))
    with pytest.raises(UserError, match=rf"^{path}:6: not a userturn record \(Invalid enum value 'maybe'"):
        scan_results(path)
    path.write_bytes(b"".join(good[:2]) + b"{not json\n" + b"".join(good[2:]))
    with pytest.raises(UserError, match=rf"^{path}:3: not a userturn record \(JSON is malformed"):
        scan_results(path)


@pytest.mark.parametrize("block", [50, 333, 4096, 1 << 20])
def test_agrees_with_read_records_across_block_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      block: int) -> None:
    monkeypatch.setattr(resume_index, "BLOCK_BYTES", block)
    rng = random.Random(block)
    path = tmp_path / "out.jsonl"
    chunks = []
    for _ in range(300):
        item = rng.randrange(60)
        ok = rng.random() < 0.6
        record = make_record(item, sample=rng.randrange(2), user_turn="é" * rng.randrange(0, 900) if ok else None,
                             status="ok" if ok else "error")
        chunks.append(line_of(record) + (b"\n" if rng.random() < 0.05 else b""))
    path.write_bytes(b"".join(chunks) + line_of(make_record("torn"))[:-25])
    records, report = read_records(path)
    index = scan_results(path)
    assert index.states.keys() == records.keys()
    assert {k for k, r in records.items() if r.status == "ok"} == set(index.ok_keys())
    assert (index.lines, index.duplicates, index.torn_tail) == (report.lines - 1, report.duplicates, True)


def test_missing_file_is_empty(tmp_path: Path) -> None:
    index = scan_results(tmp_path / "nope.jsonl")
    assert len(index) == 0 and index.lines == 0
