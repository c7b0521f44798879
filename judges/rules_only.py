"""Labelling with the deterministic rules alone (`judges.prelabel`), for runs without a judge model: an experiment
gets it with `judges: [{model: rules}]`; every record no rule labels stays *unjudged*, for `userturn judge`.
"""

from __future__ import annotations

from collections.abc import Collection

from userturn.core.records import ProbeRecord
from userturn.judges.panel import JudgeCounters
from userturn.judges.prelabel import prelabel


class RulesOnly:
    """A judge hook that applies the pre-label rules and nothing else."""

    def __init__(self) -> None:
        self.counters = JudgeCounters()  # what the run reports: its rule labels

    async def judge(self, record: ProbeRecord) -> ProbeRecord:
        verdict = prelabel(record)  # None for a record without a generation
        if verdict is None:
            return record
        out = record.model_copy(deep=True)
        out.judges = [*(v for v in out.judges if v.source != "rule"), verdict]
        out.label, out.label_source, out.judge_status = verdict.label, "rule", "ok"
        self.counters.rule_labels += 1
        return out

    def pending_judgements(self, path: str, keys: Collection[str]) -> None:
        """None: the rules label each record as it is written and keep no backlog."""
        return None

    async def check(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
