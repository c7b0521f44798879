"""Summaries of a results file: per model x dataset x mode x perturbation x temperature.

Follow-up rate = genuine_followup / labelled records (`n`). Judge failures and generation errors are not in the
denominator; they are counted beside it. Raw and chat mode are separate groups, never mixed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field
from userturn.client.errors import UserError
from userturn.client.jsonl import read_records
from userturn.client.records import LABELS, ProbeRecord
from userturn.judges.stats import wilson_interval
from userturn.judges.taxonomy import FOLLOWUP


class GroupSummary(BaseModel):
    """One row of the report (and one object of `userturn report --json`)."""

    model: str
    dataset: str
    mode: str
    perturbation: str
    temperature: float
    records: int = Field(description="all records of the group")
    n: int = Field(description="labelled records: the follow-up rate's denominator")
    followups: int
    followup_rate: float | None
    ci_low: float | None
    ci_high: float | None
    judge_failures: int
    generation_errors: int
    unjudged: int = Field(description="generated but not (yet) judged")
    labels: dict[str, int]
    rule_labels: int
    accuracy: float | None = Field(description="share of records with correct == true, among those scored")
    accuracy_n: int
    self_judged: int = Field(description="records labelled by a judge with the same model as the one probed")
    judges: list[str]

    @property
    def series(self) -> str:
        """Group identity without the temperature (one line in the temperature plot)."""
        return f"{self.model} · {self.dataset} · {self.mode} · {self.perturbation}"


def _base_name(model: str) -> str:
    name = model.strip().lower().rsplit("/", 1)[-1]
    return re.sub(r"[-_.:](instruct|chat|it)$", "", name)


def is_self_judged(record: ProbeRecord) -> bool:
    """True when an ok LLM verdict on the record came from the probed model itself (names compared loosely)."""
    base = _base_name(record.model)
    return any(v.source == "judge" and v.status == "ok" and _base_name(v.judge) == base for v in record.judges)


def summarise(records: Iterable[ProbeRecord]) -> list[GroupSummary]:
    """Group and count; groups sorted by model, dataset, mode, perturbation, temperature."""
    groups: dict[tuple, list[ProbeRecord]] = defaultdict(list)
    for r in records:
        groups[(r.model, r.dataset, r.mode, r.perturbation, float(r.temperature))].append(r)
    out = []
    for key in sorted(groups):
        rows = groups[key]
        labels = dict.fromkeys(LABELS, 0)
        for r in rows:
            if r.label is not None:
                labels[r.label] += 1
        n = sum(labels.values())
        followups = labels[FOLLOWUP]
        ci = wilson_interval(followups, n)
        scored = [r.correct for r in rows if r.correct is not None]
        judges = sorted({v.judge for r in rows for v in r.judges if v.source == "judge"})
        out.append(GroupSummary(
            model=key[0], dataset=key[1], mode=key[2], perturbation=key[3], temperature=key[4],
            records=len(rows), n=n, followups=followups,
            followup_rate=followups / n if n else None,
            ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
            judge_failures=sum(r.status == "ok" and r.judge_status == "error" for r in rows),
            generation_errors=sum(r.status != "ok" for r in rows),
            unjudged=sum(r.status == "ok" and r.label is None and r.judge_status != "error" for r in rows),
            labels=labels,
            rule_labels=sum(r.label is not None and r.label_source == "rule" for r in rows),
            accuracy=sum(scored) / len(scored) if scored else None, accuracy_n=len(scored),
            self_judged=sum(r.label_source in ("judge", "majority") and is_self_judged(r) for r in rows),
            judges=judges,
        ))
    return out


def load_results(path: str | Path) -> list[ProbeRecord]:
    """All records of a results file (last line per key). Missing file or malformed line -> UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"results file not found: {path}")
    records, _ = read_records(path)
    return list(records.values())


def to_json_rows(groups: list[GroupSummary]) -> list[dict]:
    """The `--json` array: the issue's keys first, then mode, counts and flags."""
    keys = ["model", "dataset", "perturbation", "temperature", "n", "followups", "followup_rate", "ci_low",
            "ci_high", "judge_failures", "labels", "accuracy", "mode", "records", "generation_errors", "unjudged",
            "rule_labels", "accuracy_n", "self_judged", "judges"]
    return [{k: g.model_dump()[k] for k in keys} for g in groups]
