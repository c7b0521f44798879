"""`userturn judge-eval`: score a judge (or panel) against a hand-labelled gold file.

Gold: JSONL, per line a gold `label`, the generated `user_turn` ("" is a turn, a missing or null one is not) and
the conversation as `messages` (as in a results record; so a checked judged record is gold) or as `query` (+
`response`); `id` or `key` names the line (default: its number). A line without these is refused, naming file:line.
Or the answers `userturn label` writes (`judges/gold.py`: lines with a `labeller`), one gold item per key.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from userturn.core.errors import UserError, first_error
from userturn.core.files import jsonl_objects
from userturn.core.records import Message, ProbeRecord
from userturn.core.taxonomy import LABELS, Label
from userturn.judges.agreement import cohen_kappa, fleiss_kappa
from userturn.judges.gold import GoldLine, current_answers, read_gold_lines
from userturn.judges.panel import JudgePanel

PANEL = "panel (majority)"
ERROR = "error"


class GoldItem(BaseModel):
    id: str
    label: Label
    user_turn: str = ""
    messages: list[Message] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _flexible(cls, data: dict[str, Any]) -> dict[str, Any]:
        data = dict(data)
        if data.get("user_turn") is None:
            raise ValueError("needs `user_turn` (the generated user turn its label is for)")
        if not data.get("messages"):
            if "query" not in data:
                raise ValueError("needs `messages` or `query`")
            data["messages"] = [{"role": "user", "content": str(data["query"])}]
            if data.get("response") is not None:
                data["messages"].append({"role": "assistant", "content": str(data["response"])})
        return data

    @model_validator(mode="after")
    def _has_a_query(self) -> GoldItem:
        if not any(m.role == "user" for m in self.messages):
            raise ValueError("`messages` hold no user message (the query the judge is shown)")
        return self

    def as_record(self) -> ProbeRecord:
        return ProbeRecord(key=f"gold|{self.id}", model="gold", dataset="gold", item_id=self.id, temperature=0.0,
                           sample=0, seed=0, messages=self.messages, user_turn=self.user_turn, status="ok")


def load_gold(path: str | Path) -> list[GoldItem]:
    """Read a gold file; any bad line is a UserError naming file:line. A file of `userturn label` answers (lines
    with a `labeller`) is read as `gold_items_of_answers` reads it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"gold file not found: {path}")
    if any("labeller" in obj for _, obj in jsonl_objects(path)):
        return gold_items_of_answers(path)
    items: list[GoldItem] = []
    seen: set[str] = set()
    for number, obj in jsonl_objects(path):
        obj["id"] = next((str(obj[name]) for name in ("id", "key") if obj.get(name) is not None), str(number))
        try:
            item = GoldItem.model_validate(obj)
        except ValidationError as exc:
            raise UserError(f"{path}:{number}: not a gold item ({first_error(exc, 'line')})") from None
        if item.id in seen:
            raise UserError(f"{path}:{number}: duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise UserError(f"gold file is empty: {path}")
    return items


def gold_items_of_answers(path: Path) -> list[GoldItem]:
    """The gold items of a file of labellers' answers (`judges/gold.py`): per key, the label most of its labellers
    gave (their last answers); a key whose labellers tie is left out, counted on stderr. The conversation and turn
    come from the answers themselves (`user_turn`, `messages`), so no results file is needed."""
    by_key: dict[str, list[GoldLine]] = {}
    for line in current_answers(read_gold_lines(path)).values():
        by_key.setdefault(line.key, []).append(line)
    items: list[GoldItem] = []
    tied = 0
    for key, answers in by_key.items():
        ranked = Counter(str(a.label) for a in answers).most_common()
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            tied += 1
            continue
        shown = next((a for a in answers if a.user_turn is not None and a.messages), None)
        if shown is None:
            raise UserError(f"{path}: gold key {key!r} has no `user_turn` and `messages` (judge-eval shows the judge "
                            "the turn and its conversation; `userturn label` writes both)")
        try:
            items.append(GoldItem(id=key, label=ranked[0][0], user_turn=shown.user_turn, messages=shown.messages))
        except ValidationError as exc:
            raise UserError(f"{path}: gold key {key!r}: {first_error(exc, 'line')}") from None
    if tied:
        print(f"userturn: judge-eval: {tied} gold keys of {path} left out: their labellers tied", file=sys.stderr)
    if not items:
        raise UserError(f"no gold label in {path} (every answer skipped, taken back or tied)")
    return items


class SelfAgreement(BaseModel):
    """A judge against itself: the same gold items judged `repeats` times."""

    repeats: int
    items: int = Field(description="items labelled in every repeat")
    agreement: float | None = Field(description="share of those items given the same label every time")
    kappa: float | None = Field(description="Cohen's kappa between the repeats (Fleiss' for more than two)")


def self_agreement(passes: Sequence[Sequence[str | None]]) -> SelfAgreement:
    """How often the repeats of one judge give the same label (items a repeat failed on are left out)."""
    rows = [list(labels) for labels in zip(*passes, strict=True) if all(label is not None for label in labels)]
    if not rows:
        return SelfAgreement(repeats=len(passes), items=0, agreement=None, kappa=None)
    same = sum(len(set(row)) == 1 for row in rows) / len(rows)
    kappa = (cohen_kappa([r[0] for r in rows], [r[1] for r in rows]) if len(passes) == 2
             else fleiss_kappa(rows))
    return SelfAgreement(repeats=len(passes), items=len(rows), agreement=same, kappa=kappa)


class LabelScore(BaseModel):
    label: str
    precision: float | None
    recall: float | None
    f1: float | None
    support: int
    predicted: int


class JudgeScore(BaseModel):
    """How one judge (or the panel majority) matches the gold labels."""

    judge: str
    items: int
    scored: int = Field(description="items with a label from this judge (failures excluded)")
    failures: int
    accuracy: float | None
    cohen_kappa: float | None
    per_label: list[LabelScore]
    confusion: dict[str, dict[str, int]] = Field(description="gold label -> predicted label (or 'error') -> count")
    self_agreement: SelfAgreement | None = Field(default=None, description="with --repeat: the judge against "
                                                                            "itself over the repeats")


def score(judge: str, gold: Sequence[str], predicted: Sequence[str | None]) -> JudgeScore:
    """Accuracy over labelled items, per-label precision/recall/F1, kappa vs gold, confusion matrix."""
    pairs = [(g, p) for g, p in zip(gold, predicted, strict=True) if p is not None]
    confusion = {g: dict.fromkeys([*LABELS, ERROR], 0) for g in LABELS}
    for g, p in zip(gold, predicted, strict=True):
        confusion[g][p or ERROR] += 1
    per_label = []
    gold_counts, pred_counts = Counter(g for g, _ in pairs), Counter(p for _, p in pairs)
    for label in LABELS:
        tp = sum(g == p == label for g, p in pairs)
        precision = tp / pred_counts[label] if pred_counts[label] else None
        recall = tp / gold_counts[label] if gold_counts[label] else None
        f1 = (2 * precision * recall / (precision + recall)
              if precision is not None and recall is not None and precision + recall else None)
        per_label.append(LabelScore(label=label, precision=precision, recall=recall, f1=f1,
                                    support=gold_counts[label], predicted=pred_counts[label]))
    return JudgeScore(
        judge=judge, items=len(gold), scored=len(pairs), failures=len(gold) - len(pairs),
        accuracy=sum(g == p for g, p in pairs) / len(pairs) if pairs else None,
        cohen_kappa=cohen_kappa([g for g, _ in pairs], [p for _, p in pairs]) if pairs else None,
        per_label=per_label, confusion=confusion,
    )


def exit_status(scores: Sequence[JudgeScore]) -> int:
    """1, with one line on stderr, when no judge returned a verdict for any item (every score is empty); else 0."""
    if any(s.scored for s in scores):
        return 0
    items = scores[0].items if scores else 0
    print(f"userturn: judge-eval: no verdict came back ({items} of {items} items failed for every judge): nothing "
          "was scored", file=sys.stderr)
    return 1


def _predicted(judged: Sequence[ProbeRecord], name: str) -> list[str | None]:
    """Judge `name`'s label per record (a rule's where the rules labelled it first), None where it failed."""
    predicted: list[str | None] = []
    for record in judged:
        verdict = next((v for v in record.judges if v.judge == name), None)
        predicted.append(verdict.label if verdict and verdict.status == "ok" else
                         (record.label if verdict is None and record.label_source == "rule" else None))
    return predicted


async def evaluate(items: list[GoldItem], panel: JudgePanel, workers: int = 16,
                   repeats: int = 1) -> tuple[list[JudgeScore], list[ProbeRecord]]:
    """Judge every gold item with the panel; score each judge and, for several, the majority. `repeats` > 1 judges
    every item that many times: the scores are the first pass's, and each score carries the judge's agreement with
    itself over the passes."""
    semaphore = asyncio.Semaphore(max(1, workers))

    async def one(item: GoldItem) -> ProbeRecord:
        async with semaphore:
            return await panel.judge(item.as_record())

    passes = [await asyncio.gather(*(one(item) for item in items)) for _ in range(max(1, repeats))]
    judged = passes[0]
    gold = [item.label for item in items]
    scores = [score(name, gold, _predicted(judged, name)) for name in panel.names]
    if len(panel.names) > 1:
        scores.append(score(PANEL, gold, [r.label for r in judged]))
    if repeats > 1:
        for s in scores:
            s.self_agreement = self_agreement([[r.label for r in p] if s.judge == PANEL else _predicted(p, s.judge)
                                               for p in passes])
    for item, record in zip(items, judged, strict=True):
        record.meta = {"gold_label": item.label}
    return scores, judged
