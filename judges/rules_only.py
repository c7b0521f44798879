"""Labelling with the deterministic rules alone, for runs without a judge model (the offline quick start).

`RulesOnly().judge(record)` labels what a rule is certain of (empty turn, verbatim restatement, role-token leak:
`judges.prelabel`) and leaves every other record unlabelled, to be counted as *unjudged* and labelled later by
`userturn judge`. An experiment gets it with `judges: [{model: rules}]`.
"""

from __future__ import annotations

from userturn.judges.prelabel import prelabel

from userturn.records import ProbeRecord

RULES_JUDGE = "rules"


class RulesOnly:
    """A judge hook that applies the pre-label rules and nothing else."""

    names: tuple[str, ...] = ()

    async def judge(self, record: ProbeRecord) -> ProbeRecord:
        verdict = prelabel(record) if record.status == "ok" else None
        if verdict is None:
            return record
        out = record.model_copy(deep=True)
        out.judges = [*(v for v in out.judges if v.source != "rule"), verdict]
        out.label, out.label_source, out.judge_status = verdict.label, "rule", "ok"
        return out

    async def check(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
