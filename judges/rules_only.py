"""Labelling with the deterministic rules alone (`judges.prelabel`), for runs without a judge model: an experiment
gets it with `judges: [{model: rules}]`; every record no rule labels stays *unjudged*, for `userturn judge`.
"""

from __future__ import annotations

from collections.abc import Sequence

from userturn.judges.panel import JudgeCounters
from userturn.judges.prelabel import prelabel
from userturn.judges.report import GroupSummary

from userturn.core.records import ProbeRecord


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

    async def check(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def unjudged_notice(groups: Sequence[GroupSummary], results: str) -> str | None:
    """The warning a report carries when labels are missing or come from the rules alone (which never label a
    genuine follow-up), naming the command that adds a judge; None when a judge model labelled every record."""
    unjudged, total = sum(g.unjudged for g in groups), sum(g.records for g in groups)
    how = (f"add a judge: userturn judge {results} --judge-base-url URL --judge-model NAME, then report the "
           "judged file")
    if not any(g.n for g in groups):
        if not unjudged:
            return None
        return f"none of the {total} records is labelled yet (no rule fired and no judge model labelled them); {how}."
    if not any(g.n > g.rule_labels for g in groups):
        return (f"labelled by rules only: {unjudged} of {total} records are unjudged (no rule fired and no judge "
                "model labelled them). The rules never label a genuine follow-up, so the follow-up rates here count "
                f"only rule-labelled records and are not a measurement; {how}.")
    if not unjudged:
        return None
    return (f"{unjudged} of {total} records are unjudged (outside n, the last number under excluded); to label them "
            f"{how}.")
