"""userturn/core/resume_index.py: the streaming resume scan agrees with read_records; configuration lines."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from record_factory import line_of, make_record

from userturn.core import resume_index
from userturn.core.errors import UserError
from userturn.core.jsonl import JsonlWriter, read_records
from userturn.core.records import ConfigLine, ProbeRecord
from userturn.core.resume_index import ResumeIndex, scan_results


@pytest.fixture(autouse=True)
def no_careful_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """These files are small: all of each would be the careful tail, parsed whole; here the fast path is tested."""
    monkeypatch.setattr(resume_index, "CAREFUL_TAIL_BYTES", 0)


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


def writer_line(record: ProbeRecord, **fields: object) -> bytes:
    """A record line as JsonlWriter writes it (compact, UTF-8): the form the fast path is for."""
    return record.model_copy(update=fields).model_dump_json().encode() + b"\n"


def state(index: ResumeIndex) -> tuple[object, ...]:
    return (index.ok, {fp: c.config for fp, c in index.configs.items()}, index.ok_fingerprints,
            index.unfingerprinted_keys, index.old_schema, index.lines, index.torn_tail)


def whole_line_state(path: Path, line: bytes) -> tuple[object, ...] | str:
    """What the careful path (the whole line parsed) makes of `line`, alone in `path`: its state or its error."""
    index = ResumeIndex()
    try:
        if line.strip():
            resume_index._add_whole_line(index, path, 1, line)
    except UserError as exc:
        return str(exc)
    return state(index)


def scan_state(path: Path, line: bytes) -> tuple[object, ...] | str:
    path.write_bytes(line)
    try:
        return state(scan_results(path))
    except UserError as exc:
        return str(exc)


def hand_made(key: bytes, status: bytes = b'"ok"', fingerprint: bytes = b'"0123456789abcdef"', rest: bytes = b"}",
              version: bytes = b"3") -> bytes:
    return (b'{"schema_version":' + version + b',"key":' + key + b',"status":' + status + b',"judge_status":null,'
            b'"config_fingerprint":' + fingerprint + rest + b"\n")


QUOTED = make_record('say "hi"\\now')  # a key with a quote and a backslash: escaped in JSON
UNICODE = make_record("café ✓")
BATTERY: dict[str, bytes] = {
    "writer, ok": writer_line(make_record(1), config_fingerprint="a" * 16),
    "writer, error": writer_line(make_record(2, status="error", user_turn=None, error="HTTP 503")),
    "writer, ok, judge error": writer_line(make_record(3), judge_status="error", config_fingerprint="b" * 16),
    "writer, error, judge ok": writer_line(make_record(3, status="error"), judge_status="ok"),
    "writer, no fingerprint": writer_line(make_record(4)),
    "writer, escaped quote and backslash in the key": writer_line(QUOTED, config_fingerprint="a" * 16),
    "writer, UTF-8 key": writer_line(UNICODE, config_fingerprint="a" * 16),
    "unicode escapes in the key": json.dumps(UNICODE.model_dump(mode="json")).encode() + b"\n",
    "spaces between tokens": line_of(make_record(5)),
    "other field order": json.dumps(dict(reversed(list(json.loads(line_of(make_record(6))).items())))).encode()
    + b"\n",
    "a long key": writer_line(make_record("x" * 5000)),
    "CRLF": writer_line(make_record(7))[:-1] + b"\r\n",
    "configuration line": config_of("c" * 16, max_tokens=256),
    "schema 2 with its configuration": with_fields(line_of(make_record(8)), schema_version=2,
                                                   config_fingerprint="e" * 16, config={"seed": 1}),
    "schema 30": hand_made(b'"k"', version=b"30"),
    "hand-made, head only": hand_made(b'"k|1"'),
    "hand-made, escaped slash and unicode escape": hand_made(b'"k\\/\\u00e9"'),
    "hand-made, escaped fingerprint": hand_made(b'"k"', fingerprint=b'"ab\\u0063"'),
    "hand-made, fingerprint not 16 hex digits": hand_made(b'"k"', fingerprint=b'"ABC"'),
    "hand-made, null fingerprint, more fields": hand_made(b'"k"', fingerprint=b"null", rest=b',"model":"m"}'),
    "hand-made, key not a string": hand_made(b"12"),
    "hand-made, bad status": hand_made(b'"k"', status=b'"maybe"'),
    "hand-made, fingerprint not a string": hand_made(b'"k"', fingerprint=b"7"),
    "hand-made, raw tab in the key": hand_made(b'"k\tk"'),
    "hand-made, not UTF-8": hand_made(b'"k\xff"'),
    "hand-made, not UTF-8 fingerprint": hand_made(b'"k"', fingerprint=b'"\xfe"'),
    "torn: no newline, cut short": writer_line(make_record(9))[:-30],
    "torn: cut inside the head": writer_line(make_record(9))[:40],
    "complete, no newline": writer_line(make_record(9))[:-1],
    "blank": b"  \n",
    "not JSON": b"{not json\n",
}
FAST = {"writer, ok", "writer, error", "writer, ok, judge error", "writer, error, judge ok", "writer, no fingerprint",
        "writer, UTF-8 key", "a long key", "CRLF", "hand-made, head only",
        "hand-made, null fingerprint, more fields"}


@pytest.mark.parametrize("name", sorted(BATTERY))
def test_fast_path_and_whole_parse_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Each line, scanned, reads as the careful path reads it parsed whole; the writer's lines take the fast path
    (the careful path is not called for them), every other line the careful one."""
    path = tmp_path / "out.jsonl"
    line = BATTERY[name]
    expected = whole_line_state(path, line)
    careful: list[bytes] = []
    add_whole_line = resume_index._add_whole_line

    def spy(index: ResumeIndex, path: Path, number: int, raw: bytes) -> None:
        careful.append(raw)
        add_whole_line(index, path, number, raw)

    monkeypatch.setattr(resume_index, "_add_whole_line", spy)
    assert scan_state(path, line) == expected
    assert not careful if name in FAST else careful == ([line] if line.strip() else [])


def test_the_battery_reads_as_computed_by_hand(tmp_path: Path) -> None:
    """A few of the battery's lines, their state written out: the agreement above is not two empty results."""
    path = tmp_path / "out.jsonl"
    assert whole_line_state(path, BATTERY["writer, escaped quote and backslash in the key"]) == (
        {QUOTED.key}, {}, {"a" * 16}, set(), None, 1, False)
    assert scan_state(path, BATTERY["unicode escapes in the key"]) == ({UNICODE.key}, {}, set(), {UNICODE.key},
                                                                       None, 1, False)
    assert scan_state(path, BATTERY["hand-made, escaped slash and unicode escape"])[:3] == (
        {"k/é"}, {}, {"0123456789abcdef"})
    assert scan_state(path, BATTERY["torn: cut inside the head"]) == (set(), {}, set(), set(), None, 0, True)
    assert scan_state(path, BATTERY["writer, error"])[5] == 1
    not_utf8 = scan_state(path, BATTERY["hand-made, not UTF-8"])
    assert isinstance(not_utf8, str) and not_utf8.startswith(f"{path}:1: not a userturn record (")


def test_the_writers_record_lines_take_the_fast_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RECORD_HEAD follows what JsonlWriter writes: were the record's leading fields reordered or renamed, its lines
    would take the careful path and this fails (the scan would still be right, only slow)."""
    path = tmp_path / "out.jsonl"
    with JsonlWriter(path) as writer:
        writer.write_config(ConfigLine.model_validate(json.loads(config_of("a" * 16, seed=1))))
        for i, status in enumerate(["ok", "error", "ok"]):
            writer.write(make_record(i, status=status, config_fingerprint="a" * 16, judge_status=status))
    careful: list[bytes] = []
    add_whole_line = resume_index._add_whole_line
    monkeypatch.setattr(resume_index, "_add_whole_line", lambda index, path, number, raw: (
        careful.append(raw), add_whole_line(index, path, number, raw)))
    index = scan_results(path)
    assert careful == path.read_bytes().splitlines(keepends=True)[:1]  # the configuration line only
    assert (index.ok, index.ok_fingerprints, index.lines) == ({make_record(0).key, make_record(2).key}, {"a" * 16}, 3)


def test_every_fingerprint_of_an_ok_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    fingerprints = ["a" * 16, "a" * 16, "b" * 16, "a" * 16, "b" * 16]
    lines = [writer_line(make_record(i), config_fingerprint=fp) for i, fp in enumerate(fingerprints)]
    lines.append(writer_line(make_record(9, status="error"), config_fingerprint="c" * 16))
    path.write_bytes(b"".join(lines))
    assert scan_results(path).ok_fingerprints == {"a" * 16, "b" * 16}  # an error line names none


def test_long_lines_blank_lines_and_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    lines = [config_of("a" * 16, seed=1), writer_line(make_record(1), config_fingerprint="a" * 16), b"\n",
             writer_line(make_record("y" * 3000)), writer_line(make_record(1, status="error")),
             writer_line(make_record(2)), line_of(make_record(3)), b"\n"]
    path.write_bytes(b"".join(lines) + writer_line(make_record(4))[:-9])
    index = scan_results(path)  # key 1 was ok with fingerprint a: a is named, though its later line is an error
    assert state(index) == ({make_record("y" * 3000).key, make_record(2).key, make_record(3).key},
                            {"a" * 16: {"seed": 1}}, {"a" * 16}, {make_record(k).key for k in ("y" * 3000, 2, 3)},
                            None, 5, True)
    path.write_bytes(b"".join(lines) + b"{bad\n" + writer_line(make_record(4)))
    with pytest.raises(UserError, match=rf"^{path}:9: not a userturn record"):
        scan_results(path)


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
