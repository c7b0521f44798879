"""userturn/core/resume_index.py: the streaming resume scan agrees with read_records; configuration lines."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_jsonl import line_of, make_record

from userturn.core import resume_index
from userturn.core.errors import UserError
from userturn.core.jsonl import read_records
from userturn.core.records import ConfigLine
from userturn.core.resume_index import scan_results


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
    assert index.is_ok(ok.key) and not index.is_ok(later_error.key) and not index.is_ok("nope")
    assert index.ok == {ok.key}  # the later error line of key 2 took it out again
    assert index.lines == 4
    assert index.pending([ok.key, later_error.key, "nope"]) == [1, 2]


def config_of(fingerprint: str, **settings: object) -> bytes:
    return ConfigLine(fingerprint=fingerprint, config=settings).model_dump_json().encode() + b"\n"


def test_configuration_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    lines = [
        config_of("a" * 16, max_tokens=256, top_p=None),
        with_fields(line_of(make_record(1)), judge_status="error", config_fingerprint="a" * 16),
        config_of("a" * 16, other=1),  # a later run's line of the same fingerprint: the first one stays
        with_fields(line_of(make_record(1)), judge_status="ok", config_fingerprint="a" * 16),
        config_of("b" * 16, max_tokens=512),
        with_fields(line_of(make_record(2)), config_fingerprint="b" * 16),
        with_fields(line_of(make_record(3)), config_fingerprint="c" * 16),  # no configuration line
        with_fields(line_of(make_record(4, status="error", user_turn=None)), config_fingerprint="d" * 16),
        line_of(make_record(5)),  # an older file's record: no fingerprint
    ]
    path.write_bytes(b"".join(lines))
    index = scan_results(path)
    assert {fp: c.config for fp, c in index.configs.items()} == {"a" * 16: {"max_tokens": 256, "top_p": None},
                                                                 "b" * 16: {"max_tokens": 512}}
    assert index.ok_configs == {"a" * 16: {"max_tokens": 256, "top_p": None}, "b" * 16: {"max_tokens": 512}}
    assert set(index.missing_configs()) == {"c" * 16}  # named by an ok record, described nowhere
    assert index.unfingerprinted_keys == {make_record(5).key}
    assert (index.lines, len(index.ok)) == (6, 4)  # configuration lines are not record lines


def test_records_of_schema_2_give_their_own_configuration(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    old = with_fields(line_of(make_record(1)), schema_version=2, config_fingerprint="e" * 16, config={"seed": 1})
    path.write_bytes(old)
    index = scan_results(path)
    assert index.is_ok(make_record(1).key) and index.ok_configs == {"e" * 16: {"seed": 1}}


def test_only_a_line_head_is_read_unless_it_lacks_the_resume_fields(tmp_path: Path) -> None:
    """A record line as the writer lays it out is decided by its head; one whose key pushes the fields past the
    head, or whose fields come in another order, is parsed whole: the same states either way."""
    path = tmp_path / "out.jsonl"
    long_key = make_record("x" * resume_index.HEAD_BYTES[0])  # the longer head holds it
    longer_key = make_record("y" * 2 * resume_index.HEAD_BYTES[1])  # the whole line does
    reordered = json.dumps(dict(reversed(list(json.loads(line_of(make_record(2))).items())))).encode() + b"\n"
    path.write_bytes(line_of(make_record(1)) + line_of(long_key) + line_of(longer_key) + reordered)
    index = scan_results(path)
    assert index.ok == {make_record(1).key, long_key.key, longer_key.key, make_record(2).key}


def test_torn_tail_is_reported_and_a_complete_last_line_counts(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(line_of(make_record(1)) + line_of(make_record(2))[:-40])
    index = scan_results(path)
    assert index.torn_tail and index.ok == {make_record(1).key}
    path.write_bytes(line_of(make_record(1)) + line_of(make_record(2))[:-1])
    index = scan_results(path)
    assert not index.torn_tail and len(index.ok) == 2


def test_bad_line_is_named_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    good = [line_of(make_record(i)) for i in range(6)]
    path.write_bytes(b"".join(good[:4]) + b"\n" + b'{"key": "k", "status": "maybe"}\n' + b"".join(good[4:]))
    with pytest.raises(UserError, match=rf"^{path}:6: not a userturn record \(status: must be 'ok' or 'error'"):
        scan_results(path)
    path.write_bytes(b"".join(good[:2]) + b"{not json\n" + b"".join(good[2:]))
    with pytest.raises(UserError, match=rf"^{path}:3: not a userturn record \(unexpected character"):
        scan_results(path)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_read_records(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
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
    assert {k for k, r in records.items() if r.status == "ok"} == index.ok
    assert (index.lines, index.torn_tail) == (report.lines, True)


def test_missing_file_is_empty(tmp_path: Path) -> None:
    index = scan_results(tmp_path / "nope.jsonl")
    assert not index.ok and index.lines == 0
