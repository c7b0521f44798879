"""What a judge panel still has to do with a results file, read as a stream (never every record at once).

Per key (its last line wins) only what resuming needs is kept: the byte offset of a record still to judge, a hash
of its generated turn, the line of a record another panel labelled. Used by the inline judge on resume
(`JudgePanel.pending_judgements`) and by `userturn judge` for its output file.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from userturn.judges.panel import Assessment, JudgingFacts
from userturn.judges.report_scan import parse_record

from userturn.core.errors import UserError, damaged_line
from userturn.core.jsonl import is_config_line
from userturn.core.records import ProbeRecord

Assess = Callable[[JudgingFacts], Assessment]


def iter_lines(path: Path) -> Iterator[tuple[int, int, bytes, bool]]:
    """(line number, byte offset, stripped line, ends with a newline?) of each non-empty line."""
    offset = 0
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            start, offset = offset, offset + len(raw)
            line = raw.strip()
            if line:
                yield number, start, line, raw.endswith(b"\n")


def decode_line(path: Path, number: int, line: bytes, complete: bool) -> dict[str, Any] | None:
    """A results line as a JSON object with a string `key`; None for a configuration line or a torn final line
    (no newline); UserError naming path:line for any other malformed line."""
    if is_config_line(line):
        return None
    try:
        obj = orjson.loads(line)
        problem = None if isinstance(obj, dict) and isinstance(obj.get("key"), str) else "no string `key`"
    except orjson.JSONDecodeError as exc:
        problem = str(exc).splitlines()[0]
    if problem is None:
        return obj
    if not complete:
        return None
    raise damaged_line(path, number, problem)


def read_record(fh: Any, path: Path, offset: int) -> ProbeRecord:
    """The record on the line starting at `offset` of an open results file."""
    fh.seek(offset)
    return parse_record(fh.readline(), f"{path}: line at byte {offset}")


@dataclass
class JudgingScan:
    """Per key of one results file, what a panel has to do (see `JudgePanel.assess`)."""

    path: Path
    todo: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (byte offset, hash of user_turn)
    done: dict[str, int] = field(default_factory=dict)  # key -> hash of user_turn (only with keep_done)
    foreign: dict[str, tuple[int, JudgingFacts]] = field(default_factory=dict)  # key -> (line, facts)

    def refuse_mix(self, panel: str, hint: str) -> None:
        """Raise UserError (exit 2) when records are labelled by another panel: judging on would mix panels."""
        if not self.foreign:
            return
        line, facts = min(self.foreign.values(), key=lambda f: f[0])
        raise UserError(f"{self.path}:{line}: {len(self.foreign)} records are labelled by another judge panel "
                        f"({facts.describe()}), not by this one ({panel}); {hint}")

    def records(self) -> Iterator[ProbeRecord]:
        """The records still to judge, in file order, read one at a time."""
        if not self.todo:
            return
        offsets = sorted(offset for offset, _ in self.todo.values())
        with self.path.open("rb") as fh:
            for offset in offsets:
                yield read_record(fh, self.path, offset)


def scan_judging(path: str | Path, assess: Assess, *, keys: Container[str] | None = None,
                 keep_done: bool = False) -> JudgingScan:
    """Stream `path` and sort its records (last line per key; only `keys` when given) by `assess`; "done" and
    "no_generation" records are forgotten unless `keep_done` (then only their turn's hash is kept)."""
    path = Path(path)
    scan = JudgingScan(path)
    if not path.exists():
        return scan
    for number, offset, line, complete in iter_lines(path):
        obj = decode_line(path, number, line, complete)
        if obj is None:
            continue
        key = obj["key"]
        if keys is not None and key not in keys:
            continue
        facts = JudgingFacts.of_json(obj)
        verdict = assess(facts)
        scan.todo.pop(key, None)
        scan.foreign.pop(key, None)
        scan.done.pop(key, None)
        if verdict == "todo":
            scan.todo[key] = (offset, hash(obj.get("user_turn")))
        elif verdict == "foreign":
            scan.foreign[key] = (number, facts)
        elif keep_done:
            scan.done[key] = hash(obj.get("user_turn"))
    return scan
