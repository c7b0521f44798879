"""`userturn judge-eval`: score a judge (or panel) against a hand-labelled gold file.

Gold: JSONL, per line a gold `label`, the generated `user_turn` ("" is a turn, a missing or null one is not) and
the conversation as `messages` (as in a results record; so a checked judged record is gold) or as `query` (+
`response`); `id` or `key` names the line (default: its number). A line without these is refused, naming file:line.
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
from userturn.judges.agreement import cohen_kappa
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
    """Read a gold file; any bad line is a UserError naming file:line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"gold file not found: {path}")
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


async def evaluate(items: list[GoldItem], panel: JudgePanel, workers: int = 16) -> tuple[list[JudgeScore],
                                                                                           list[ProbeRecord]]:
    """Judge every gold item with the panel; score each judge and, for several, the majority."""
    semaphore = asyncio.Semaphore(max(1, workers))

    async def one(item: GoldItem) -> ProbeRecord:
        async with semaphore:
            return await panel.judge(item.as_record())

    judged = await asyncio.gather(*(one(item) for item in items))
    gold = [item.label for item in items]
    scores = []
    for name in panel.names:
        predicted = []
        for record in judged:
            verdict = next((v for v in record.judges if v.judge == name), None)
            predicted.append(verdict.label if verdict and verdict.status == "ok" else
                             (record.label if verdict is None and record.label_source == "rule" else None))
        scores.append(score(name, gold, predicted))
    if len(panel.names) > 1:
        scores.append(score(PANEL, gold, [r.label for r in judged]))
    for item, record in zip(items, judged, strict=True):
        record.meta = {"gold_label": item.label}
    return scores, judged
