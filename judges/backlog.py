"""What a judge panel still has to do with a results file, read as a stream (never every record at once) over
`userturn.core.results_reader`.

Per key (its last line wins) only what resuming needs is kept: the byte offset of a record still to judge, a digest
of its generated turn, the line of a record another panel labelled. Used by the inline judge on resume
(`JudgePanel.pending_judgements`) and by `userturn judge` for its output file.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord
from userturn.core.results_reader import Line, decode, is_config_line, parse_record, read_lines
from userturn.core.text import digest
from userturn.judges.panel import Assessment, JudgingFacts

Assess = Callable[[JudgingFacts], Assessment]


def _keyed(obj: Any) -> dict[str, Any]:
    """A record line as the JSON object it is; ValueError when it has no string `key`."""
    if isinstance(obj, dict) and isinstance(obj.get("key"), str):
        return obj
    raise ValueError("no string `key`")


def decode_line(path: Path, line: Line) -> dict[str, Any] | None:
    """A results line as a JSON object with a string `key`; None for a configuration line or the torn final line;
    `errors.damaged_line` naming path:line for any other malformed line (`results_reader.decode`)."""
    if is_config_line(line.raw):
        return None
    decoded = decode(path, line, _keyed, damaged=True)
    return decoded if isinstance(decoded, dict) else None


def read_record(fh: Any, path: Path, offset: int) -> ProbeRecord:
    """The record on the line starting at `offset` of an open results file."""
    fh.seek(offset)
    return parse_record(fh.readline(), f"{path}: line at byte {offset}")


@dataclass
class JudgingScan:
    """Per key of one results file, what a panel has to do (see `JudgePanel.assess`)."""

    path: Path
    todo: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # key -> (byte offset, digest of user_turn)
    done: dict[str, bytes] = field(default_factory=dict)  # key -> digest of user_turn (only with keep_done)
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
    "no_generation" records are forgotten unless `keep_done` (then only their
    turn's digest is kept, `core.text.digest`)."""
    path = Path(path)
    scan = JudgingScan(path)
    if not path.exists():
        return scan
    for line in read_lines(path):
        obj = decode_line(path, line)
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
            scan.todo[key] = (line.offset, digest(obj.get("user_turn")))
        elif verdict == "foreign":
            scan.foreign[key] = (line.number, facts)
        elif keep_done:
            scan.done[key] = digest(obj.get("user_turn"))
    return scan
