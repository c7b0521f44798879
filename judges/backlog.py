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
from typing import IO, Any, TypeVar

import msgspec

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord
from userturn.core.results_reader import (
    decode_with,
    is_config_line,
    line_number_at,
    open_results,
    parse_record,
    raw_lines,
)
from userturn.core.text import digest
from userturn.judges.panel import Assessment, JudgingFacts

Assess = Callable[[JudgingFacts], Assessment]


class _Verdict(msgspec.Struct):
    """What judging reads of a verdict (`JudgingFacts.verdicts`); its rationale and raw reply are skipped."""

    judge: Any = None
    source: Any = "judge"
    status: Any = None
    prompt_sha256: Any = None


class RecordHead(msgspec.Struct):
    """What judging reads of a record line: its key, status, generated turn and labels. Decoding into it checks the
    whole line's JSON and builds only these fields (a million lines in seconds, where a `ProbeRecord` each took a
    minute); the record itself is parsed when it is read back to be judged."""

    key: str
    status: Any = None
    user_turn: Any = None
    label: Any = None
    label_source: Any = None
    judge_panel: Any = None
    judges: list[_Verdict] | None = None

    def facts(self) -> JudgingFacts:
        """`JudgingFacts.of_json` of the line, without the dict."""
        verdicts = tuple((str(v.judge), str(v.source), str(v.status), v.prompt_sha256) for v in self.judges or ())
        return JudgingFacts(str(self.status), self.label, self.label_source, self.judge_panel, verdicts)


class TurnHead(msgspec.Struct):
    """`RecordHead` cut to what planning the judge's input reads: key, status and generated turn."""

    key: str
    status: Any = None
    user_turn: Any = None


H = TypeVar("H", RecordHead, TurnHead)


def record_heads(path: Path, kind: type[H]) -> Iterator[tuple[int, int, H]]:
    """(line number, byte offset, head as `kind`) of every record line of a results file, in order: configuration
    lines, blank lines and the torn final line passed over; `errors.damaged_line` naming path:line for a damaged
    line."""
    _decode_head = msgspec.json.Decoder(kind).decode
    offset = 0
    with open_results(path) as fh:
        for number, raw in raw_lines(fh):
            start, offset = offset, offset + len(raw)
            try:
                head: H | None = _decode_head(raw)
            except (msgspec.DecodeError, msgspec.ValidationError):  # told apart only here: records are the rule
                if not raw.strip() or is_config_line(raw):
                    continue
                head = decode_with(path, number, raw, _decode_head)  # the torn final line, or damaged_line
            if head is not None:
                yield number, start, head


def read_record(fh: IO[bytes], path: Path, offset: int) -> ProbeRecord:
    """The record on the line starting at `offset` of an open results file (`errors.damaged_line` naming its line
    when it is none)."""
    fh.seek(offset)
    raw = fh.readline()
    try:
        return parse_record(raw, path, 0)
    except UserError:
        return parse_record(raw, path, line_number_at(path, offset))


@dataclass
class JudgingScan:
    """Per key of one results file, what a panel has to do (see `JudgePanel.assess`)."""

    path: Path
    todo: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # key -> (byte offset, digest of user_turn)
    done: dict[bytes, bytes] = field(default_factory=dict)  # digest of key -> digest of user_turn (with keep_done)
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
    for number, offset, head in record_heads(path, RecordHead):
        key = head.key
        if keys is not None and key not in keys:
            continue
        facts = head.facts()
        verdict = assess(facts)
        scan.todo.pop(key, None)
        scan.foreign.pop(key, None)
        scan.done.pop(digest(key), None)
        if verdict == "todo":
            scan.todo[key] = (offset, digest(head.user_turn))
        elif verdict == "foreign":
            scan.foreign[key] = (number, facts)
        elif keep_done:
            scan.done[digest(key)] = digest(head.user_turn)
    return scan
