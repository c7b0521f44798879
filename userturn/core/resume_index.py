"""What a resume needs from a results file, read in one streaming pass over `results_reader.raw_lines`: the file
is the only state.

`scan_results(path)` keeps the keys whose last line is ok and the file's configurations. Each line is first matched
against `RECORD_HEAD` (the resume fields of the current schema, as the writer writes them, as plain strings), its end
checked and its JSON proved well-formed (`results_reader.is_json`: a line damaged in its middle, anywhere in the file,
is found as the readers find it); any other line, and every line of the file's last `CAREFUL_TAIL_BYTES` (where a crash
leaves damage), is parsed whole by `results_reader.decode` and gives the same state (tests/core/test_resume_index.py): a
configuration line is taken, a torn final line skipped (`torn_tail`), any other line that does not parse is
`errors.damaged_line` naming file:line. The last line of a key decides (the reader's superseding rule, kept as set
operations). Memory: the ok keys and one buffer (1,000,000 records peaked at 165 MB: docs/results-format.md).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from userturn.core.records import KEY_FORMAT_SINCE, SCHEMA_VERSION, ConfigLine
from userturn.core.results_reader import decode_raw, is_json, legacy_config, open_results, raw_lines

CAREFUL_TAIL_BYTES = 4 << 20  # the file's last bytes, where a crash leaves damage: every line there is parsed whole

_PLAIN = rb'"([^"\\\x00-\x1f]*)"'  # a JSON string that is its own UTF-8 bytes: no escape, no control character
# The head of a record line exactly as JsonlWriter writes it (compact: `model_dump_json`; a fingerprint is 16 hex
# digits, `userturn.core.fingerprint`): a scan in 0.45x the time of parsing every line whole
# (`benchmarks/bench_fast_paths.py --part resume`).
RECORD_HEAD = re.compile(
    rb'\{"schema_version":' + str(SCHEMA_VERSION).encode() + rb',"key":' + _PLAIN + rb',"status":"(ok|error)",'
    rb'"judge_status":(?:null|"ok"|"error"),"config_fingerprint":(?:null|"([0-9a-f]{16})")[,}]')


@dataclass
class ResumeIndex:
    """The keys of a results file whose last line is ok, the configurations in it, and what the scan found."""

    ok: set[str] = field(default_factory=set)
    configs: dict[str, ConfigLine] = field(default_factory=dict)  # fingerprint -> its configuration (first line)
    ok_fingerprints: set[str] = field(default_factory=set)  # the fingerprints named by ok records
    unfingerprinted_keys: set[str] = field(default_factory=set)  # ok records without one (files from before it)
    old_schema: tuple[int, str] | None = None  # (schema_version, key) of the first record in the pre-2 key format
    lines: int = 0  # record lines
    torn_tail: bool = False

    @property
    def ok_configs(self) -> dict[str, dict[str, Any]]:
        """{fingerprint: settings} of the configurations ok records were made with."""
        return {fp: self.configs[fp].config for fp in self.ok_fingerprints if fp in self.configs}

    def is_ok(self, key: str) -> bool:
        return key in self.ok

    def pending(self, keys: list[str]) -> list[int]:
        """Positions of the `keys` not yet ok."""
        ok = self.ok
        return [i for i, key in enumerate(keys) if key not in ok]

    def missing_configs(self) -> Collection[str]:
        """Fingerprints named by ok records whose configuration the file does not describe."""
        return self.ok_fingerprints - self.configs.keys()


def scan_results(path: str | Path) -> ResumeIndex:
    """Stream `path` into a ResumeIndex (empty if the file does not exist)."""
    path = Path(path)
    index = ResumeIndex()
    if not path.exists():
        return index
    fh = open_results(path)
    # The hot loop (a million lines): a match and a set operation per record line.
    match = RECORD_HEAD.match
    ok_keys, ok_fingerprints, unfingerprinted = index.ok, index.ok_fingerprints, index.unfingerprinted_keys
    records = 0
    last_fingerprint = None  # of the last ok line: consecutive records mostly share one
    careful_from = max(0, path.stat().st_size - CAREFUL_TAIL_BYTES)
    position = 0
    with fh:
        for number, line in raw_lines(fh):
            # Parsed whole: a line in the careful tail, a last line without a newline, a line whose head is a
            # record's but whose end is not (cut short, zeroed). A damaged line is never counted as done.
            position += len(line)
            head = match(line) if position <= careful_from and line.endswith((b"}\n", b"}\r\n")) else None
            if head is not None and not is_json(line):
                head = None  # damaged between its head and its end: the careful path names it
            if head is not None:
                key_bytes, status, fingerprint = head.groups()
                try:
                    key = key_bytes.decode()
                except UnicodeDecodeError:  # not UTF-8: the careful path says so
                    head = None
            if head is None:
                if line.strip():
                    _add_whole_line(index, path, number, line)
            elif status == b"ok":
                records += 1
                ok_keys.add(key)
                if fingerprint is None:
                    unfingerprinted.add(key)
                elif fingerprint != last_fingerprint:
                    last_fingerprint = fingerprint
                    ok_fingerprints.add(fingerprint.decode())
            else:
                records += 1
                ok_keys.discard(key)
    index.lines += records
    return index


def _add_whole_line(index: ResumeIndex, path: Path, number: int, raw: bytes) -> None:
    """A line whose head did not give the resume fields: parsed whole (a torn final line is reported)."""
    decoded = decode_raw(path, number, raw, raw.endswith(b"\n"), _record_state)
    if not isinstance(decoded, tuple):  # not a record (tested first: records are the common case)
        if decoded is None:
            index.torn_tail = True
        elif isinstance(decoded, ConfigLine):
            index.configs.setdefault(decoded.fingerprint, decoded)
        return
    obj, key, status = decoded
    index.lines += 1
    if status == "ok":
        index.ok.add(key)
    else:
        index.ok.discard(key)
    version = obj.get("schema_version", 1)
    if index.old_schema is None and isinstance(version, int) and version < KEY_FORMAT_SINCE:
        index.old_schema = (version, key)
    fingerprint = obj.get("config_fingerprint")
    old = legacy_config(obj)  # a record of schema 2 carries its configuration itself
    if old is not None:
        index.configs.setdefault(old.fingerprint, old)
    if status == "ok":
        if isinstance(fingerprint, str):
            index.ok_fingerprints.add(fingerprint)
        else:
            index.unfingerprinted_keys.add(key)


def _record_state(obj: Any) -> tuple[dict[str, Any], str, Literal["ok", "error"]]:
    """(the line, key, status) of a decoded record line; ValueError naming the field when it is no record."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if not isinstance(obj.get("key"), str):
        raise ValueError("key: missing or not a string")
    status, judge = obj.get("status"), obj.get("judge_status")
    if status not in ("ok", "error"):
        raise ValueError("status: must be 'ok' or 'error'")
    if judge not in (None, "ok", "error"):
        raise ValueError("judge_status: must be 'ok', 'error' or null")
    fingerprint = obj.get("config_fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise ValueError("config_fingerprint: not a string")
    return obj, obj["key"], status
