"""A blind labelling session (`userturn label`): the records people label, the order one labeller sees them in, and
the answers given, each appended to the gold file (`judges.gold`) as it comes. No HTTP: `label_server` serves it.

**The sample** is drawn from the current ok records that have a user turn, stratified over what the report groups
by and the judge's verdict: model × dataset × mode × perturbation × temperature × the record's label (unjudged
records are a stratum of their own). `--n` is allocated in proportion to each stratum's size, rounded by largest
remainder (ties between equal remainders broken by the seed): a stratum of s records out of N gets ⌊n·s/N⌋ or one
more, so the sample is self-weighting and rates computed from its gold labels need no weights. Within a stratum the
records are drawn at random by the seed. The sample depends on the records and the seed only; each labeller sees it
in an order of their own (seeded by seed and labeller), so two labellers label the same records in different orders.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord, group_key
from userturn.core.taxonomy import LABELS, TAXONOMY
from userturn.judges.gold import GoldLine, append_gold, now, read_gold_lines

S = TypeVar("S", bound=Hashable)
Stratum = tuple[str, str, str, str, float, str]


def stratum(record: ProbeRecord) -> Stratum:
    """The stratum a record is drawn from: its report row (`records.group_key`) and the judge's label ('' when
    unjudged)."""
    return (*group_key(record), record.label or "")


def labellable(records: Iterable[ProbeRecord]) -> list[ProbeRecord]:
    """The records people can label: ok, with a user turn (an empty turn counts: `empty` is a label)."""
    return [r for r in records if r.status == "ok" and r.user_turn is not None]


def allocate(sizes: Mapping[S, int], n: int, rng: random.Random) -> dict[S, int]:
    """`n` draws shared out over strata in proportion to their sizes by largest remainder (see the module
    docstring); every stratum in full when `n` reaches the total. Strata are taken in the mapping's order."""
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    counts = {s: n * size // total for s, size in sizes.items()}
    ties = {s: rng.random() for s in sizes}
    by_remainder = sorted(sizes, key=lambda s: (-(n * sizes[s] % total), ties[s]))
    for s in by_remainder[: n - sum(counts.values())]:
        counts[s] += 1
    return counts


def draw_sample(records: Iterable[ProbeRecord], n: int, seed: int) -> list[ProbeRecord]:
    """The seeded stratified sample of `labellable` records (the module docstring), ordered by key."""
    strata: dict[Stratum, list[ProbeRecord]] = {}
    for record in sorted(labellable(records), key=lambda r: r.key):
        strata.setdefault(stratum(record), []).append(record)
    strata = dict(sorted(strata.items()))
    rng = random.Random(f"userturn label sample {seed}")
    counts = allocate({s: len(members) for s, members in strata.items()}, n, rng)
    chosen = [r for s, members in strata.items() for r in rng.sample(members, counts[s])]
    return sorted(chosen, key=lambda r: r.key)


def labeller_order(sample: list[ProbeRecord], seed: int, labeller: str) -> list[ProbeRecord]:
    """The sample in the order one labeller sees it (seeded by the seed and the labeller's name)."""
    order = list(sample)
    random.Random(f"userturn label order {seed} {labeller}").shuffle(order)
    return order


class Answer(BaseModel):
    """What the page sends for the record at `index`: a label, a skip, or neither (the answer taken back)."""

    index: int
    label: str | None = None
    skipped: bool = False
    note: str | None = None


class LabelSession:
    """One labeller's pass over the sample: which records are answered (from the gold file, so a rerun resumes),
    what the page shows of a record (nothing that names the model, temperature, perturbation, verdict or key), and
    each answer appended to the gold file before it is acknowledged."""

    def __init__(self, records: list[ProbeRecord], out: Path, labeller: str) -> None:
        self.records, self.out, self.labeller = records, out, labeller
        keys = {r.key for r in records}
        self.answers: dict[str, GoldLine] = {}
        if out.exists():
            for line in read_gold_lines(out):
                if line.labeller == labeller and line.key in keys:
                    self.answers[line.key] = line

    @property
    def n(self) -> int:
        return len(self.records)

    def answered(self, index: int) -> bool:
        """Whether this labeller has answered the record at `index` (a label or a skip; a taken-back one is open)."""
        line = self.answers.get(self.records[index].key)
        return line is not None and (line.label is not None or line.skipped)

    def first_open(self) -> int:
        """Where a session starts: the first record without an answer (`n` when all are answered)."""
        return next((i for i in range(self.n) if not self.answered(i)), self.n)

    def state(self) -> dict[str, Any]:
        """What the page needs besides one record: the labels (from the label table), progress, the records still open
        (`open`, indices) and where to start (the first open one)."""
        open_ = [i for i in range(self.n) if not self.answered(i)]
        return {"n": self.n, "answered": self.n - len(open_), "open": open_, "start": open_[0] if open_ else self.n,
                "labeller": self.labeller,
                "labels": [{"name": i.name, "short": i.short, "description": i.description, "key": str(k)}
                           for k, i in enumerate(TAXONOMY, start=1)]}

    def _index(self, index: int) -> int:
        if not 0 <= index < self.n:
            raise UserError(f"no record {index} (the sample has {self.n})")
        return index

    def item(self, index: int) -> dict[str, Any]:
        """The record at `index` as the page shows it: the conversation as probed and the user turn, blind."""
        record = self.records[self._index(index)]
        line = self.answers.get(record.key)
        answer = None if line is None else {"label": line.label, "skipped": line.skipped, "note": line.note}
        return {"index": index, "n": self.n, "user_turn": record.user_turn, "answer": answer,
                "messages": [{"role": m.role, "content": m.content} for m in record.messages]}

    def answer(self, given: Answer) -> GoldLine:
        """Append one answer to the gold file (flushed to disk before returning) and keep it as the current one."""
        record = self.records[self._index(given.index)]
        if given.label is not None and given.label not in LABELS:
            raise UserError(f"unknown label {given.label!r}")
        if given.label is not None and given.skipped:
            raise UserError("an answer is a label or a skip, not both")
        note = (given.note or "").strip() or None
        line = GoldLine.model_validate({
            "key": record.key, "label": given.label, "labeller": self.labeller, "note": note,
            "skipped": given.skipped, "user_turn": record.user_turn, "messages": record.messages, "at": now()})
        append_gold(self.out, line)
        self.answers[record.key] = line
        return line
