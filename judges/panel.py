"""A panel of one or more judges plus the rule pre-labels: `JudgePanel.judge(record)` labels a `ProbeRecord` for
`userturn probe` (inline) and `userturn judge` (afterwards)."""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import orjson
from pydantic import BaseModel, Field

from userturn.core.errors import UserError
from userturn.core.records import JudgeVerdict, ProbeRecord
from userturn.core.taxonomy import is_followup
from userturn.judges.agreement import majority_label
from userturn.judges.llm_judge import JudgeConfig, LLMJudge
from userturn.judges.prelabel import RESTATE_THRESHOLD, prelabel, query_and_response
from userturn.judges.prompt import JudgePrompt, load_prompt

if TYPE_CHECKING:
    from userturn.judges.backlog import JudgingScan


@dataclass
class JudgeCounters:
    """Live counts for the progress view (records, not HTTP calls)."""

    judged: int = 0  # records labelled by the judge panel
    judge_failures: int = 0  # records no judge could label (judge_status "error")
    rule_labels: int = 0  # records labelled by a pre-label rule
    verdict_errors: int = 0  # single judge verdicts that failed (the record may still have a majority)
    failures_with_reply: int = 0  # failed records where a judge answered: its unusable reply is in `raw`
    failures_without_reply: int = 0  # failed records where no judge answered (request errors): only `error`
    labels: dict[str, int] = field(default_factory=dict)

    def followup_rate(self) -> float | None:
        labelled = sum(self.labels.values())
        return sum(n for label, n in self.labels.items() if is_followup(label)) / labelled if labelled else None


class PanelConfig(BaseModel):
    judges: list[JudgeConfig] = Field(min_length=1)
    judge_all: bool = Field(default=False, description="send rule-labelled records to the judges too")
    force: bool = Field(default=False, description="re-ask judges that already have an ok verdict on the record")
    keep_other_verdicts: bool = Field(default=False, description="keep (non-voting) verdicts of other judges")
    rejudge: bool = Field(default=False, description="judge again records labelled by another panel")
    restate_threshold: float = Field(default=RESTATE_THRESHOLD, gt=0, le=1)
    prompt_path: Path | None = None


Assessment = Literal["no_generation", "done", "todo", "foreign"]
INLINE_HINT = ("label them into another file with `userturn judge RESULTS.jsonl --out OTHER.jsonl ...`, or pass "
               "--rejudge to label them again with this panel")


def panel_id(judges: Sequence[str], prompt_sha256: str) -> str:
    """The identity of a judge panel, 16 hex characters: its judge models in order (ties go to the first) and the
    sha256 of its prompt file. Sampling settings (temperature, max tokens, extra body) are not part of it."""
    canonical = orjson.dumps({"judges": list(judges), "prompt_sha256": prompt_sha256})
    return hashlib.sha256(canonical).hexdigest()[:16]


class JudgingFacts(NamedTuple):
    """What deciding whether a record still needs this panel takes; read from a record or from its raw JSON."""

    status: str
    label: str | None
    label_source: str | None
    judge_panel: str | None
    verdicts: tuple[tuple[str, str, str, str | None], ...]  # (judge, source, status, prompt_sha256)

    @classmethod
    def of_json(cls, obj: dict[str, Any]) -> JudgingFacts:
        """From a decoded results line (no validation: unknown shapes read as 'not judged')."""
        verdicts = tuple((str(v.get("judge")), str(v.get("source", "judge")), str(v.get("status")),
                          v.get("prompt_sha256")) for v in obj.get("judges") or () if isinstance(v, dict))
        return cls(str(obj.get("status")), obj.get("label"), obj.get("label_source"), obj.get("judge_panel"),
                   verdicts)

    def describe(self) -> str:
        """The panel that labelled the record, in words: its judges and prompt hashes."""
        names = list(dict.fromkeys(j for j, source, _, _ in self.verdicts if source == "judge"))
        shas = list(dict.fromkeys((sha or "none")[:12] for _, source, _, sha in self.verdicts if source == "judge"))
        panel = f"panel {self.judge_panel}: " if self.judge_panel else ""
        return f"{panel}judges {', '.join(names) or '(none)'}, prompt sha256 {', '.join(shas) or '(none)'}"


class JudgePanel:
    """Labels records: rule pre-label first, then every judge of the panel, then the majority label."""

    def __init__(self, config: PanelConfig, prompt: JudgePrompt | None = None,
                 judges: list[LLMJudge] | None = None) -> None:
        names = [j.model for j in config.judges]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise UserError(f"judge model given twice: {', '.join(duplicates)} (verdicts are keyed by model name)")
        self.config = config
        self.prompt = prompt or load_prompt(config.prompt_path)
        self.judges = judges or [LLMJudge(jc, self.prompt) for jc in config.judges]
        self.counters = JudgeCounters()
        self.id = panel_id(self.names, self.prompt.sha256)

    @property
    def names(self) -> list[str]:
        return [j.name for j in self.judges]

    async def check(self) -> None:
        for judge in self.judges:
            await judge.check()

    async def aclose(self) -> None:
        for judge in self.judges:
            await judge.aclose()

    async def __aenter__(self) -> JudgePanel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def pending_judgements(self, path: str | Path, keys: Collection[str]) -> JudgingScan:
        """The ok records among `keys` in the results file that this panel still has to label (the probe's inline
        judging calls this on resume); UserError (exit 2) for a file labelled by another panel unless `rejudge`."""
        from userturn.judges.backlog import scan_judging

        scan = scan_judging(path, self.assess, keys=keys if isinstance(keys, set | frozenset) else set(keys))
        scan.refuse_mix(self.describe(), INLINE_HINT)
        return scan

    def describe(self) -> str:
        """This panel in words, as `JudgingFacts.describe` words a recorded one."""
        return f"panel {self.id}: judges {', '.join(self.names)}, prompt sha256 {self.prompt.sha256[:12]}"

    def _same_panel(self, facts: JudgingFacts) -> bool:
        if facts.judge_panel is not None:
            return facts.judge_panel == self.id
        # Written before panel ids: the same panel when every ok judge verdict is one of this panel's.
        members = {(name, self.prompt.sha256) for name in self.names}
        voters = {(judge, sha) for judge, source, status, sha in facts.verdicts if source == "judge" and status == "ok"}
        return bool(voters) and voters <= members

    def assess(self, facts: JudgingFacts) -> Assessment:
        """What this panel has to do with a record: "no_generation" (status "error"); "foreign" (labelled by another
        panel and `rejudge` is off: judging would mix two panels in one file); "done" (a rule label unless
        `judge_all`, or an ok verdict of this panel from every judge); "todo" (everything else)."""
        if facts.status != "ok":
            return "no_generation"
        if facts.label is not None and facts.label_source != "rule" and not self._same_panel(facts):
            return "todo" if self.config.rejudge else "foreign"
        if facts.label is not None and facts.label_source == "rule":
            return "todo" if self.config.judge_all else "done"
        if not self.config.judge_all and any(source == "rule" for _, source, _, _ in facts.verdicts):
            return "todo"  # judged under --judge-all; without it the rule decides (no request is sent)
        have = {judge for judge, source, status, sha in facts.verdicts
                if source == "judge" and status == "ok" and sha == self.prompt.sha256}
        if facts.label is not None and all(name in have for name in self.names):
            return "done"
        return "todo"

    def is_done(self, record: ProbeRecord) -> bool:
        """Nothing left to do: no generation, a rule label (unless judge_all), or this panel's complete verdicts."""
        return self.assess(JudgingFacts.of_json(record.model_dump(mode="json"))) in ("no_generation", "done")

    async def judge(self, record: ProbeRecord) -> ProbeRecord:
        """A copy of `record` with `judges`, `label`, `label_source` and `judge_status` set (a record without a
        generation comes back unchanged). Verdicts of judges outside this panel are dropped, or kept without a vote
        when `keep_other_verdicts`. Raises EndpointError if a judge endpoint is unusable."""
        if record.status != "ok":
            return record
        out = record.model_copy()  # shallow: only top-level fields are assigned below, nothing nested is mutated
        panel = set(self.names)
        sha = self.prompt.sha256
        previous = [v for v in out.judges if v.source == "judge"]
        others = [v for v in previous if v.judge not in panel] if self.config.keep_other_verdicts else []
        kept = {v.judge: v for v in previous
                if v.judge in panel and v.status == "ok" and v.prompt_sha256 == sha and not self.config.force}
        rule = prelabel(out, self.config.restate_threshold)
        out.judges = [*others, *([rule] if rule else [])]
        out.judge_panel = self.id
        if rule is not None and not self.config.judge_all:
            out.label, out.label_source, out.judge_status = rule.label, "rule", "ok"
            self._count(out)
            return out
        query, response = query_and_response(out)
        todo = [j for j in self.judges if j.name not in kept]
        fresh = await asyncio.gather(*(j.judge(query, response, out.user_turn or "") for j in todo))
        verdicts: dict[str, JudgeVerdict] = {**kept, **{v.judge: v for v in fresh}}
        self.counters.verdict_errors += sum(v.status == "error" for v in fresh)
        ordered = [verdicts[name] for name in self.names]
        out.judges.extend(ordered)
        label = majority_label([v.label for v in ordered if v.status == "ok" and v.label])
        out.label = label  # type: ignore[assignment]
        out.label_source = None if label is None else "judge" if len(self.judges) == 1 else "majority"
        out.judge_status = "error" if label is None else "ok"
        self._count(out)
        return out

    def _count(self, record: ProbeRecord) -> None:
        c = self.counters
        if record.judge_status == "error":
            c.judge_failures += 1
            if any(v.raw is not None for v in record.judges if v.source == "judge" and v.status == "error"):
                c.failures_with_reply += 1
            else:
                c.failures_without_reply += 1
            return
        if record.label_source == "rule":
            c.rule_labels += 1
        else:
            c.judged += 1
        if record.label:
            c.labels[record.label] = c.labels.get(record.label, 0) + 1


def judge_failure_line(prog: str, failures: int, where: str, counters: JudgeCounters | None = None) -> str:
    """One line saying exactly what was kept for generated records no judge could label (exit status 1)."""
    if counters is not None:
        kept = []
        if counters.failures_with_reply:
            kept.append(f"{counters.failures_with_reply} with the judge's unusable reply in judges[].raw")
        if counters.failures_without_reply:
            kept.append(f"{counters.failures_without_reply} without any judge reply (the request failed; its error "
                        "is in judges[].error)")
        detail = "; ".join(kept)
    else:
        detail = "each failed verdict keeps its error in judges[].error and, where the judge answered, its reply in " \
                 "judges[].raw"
    return (f"{prog}: {failures} generated records in {where} have no label because the judge failed "
            f"(judge_status \"error\"; the generation is kept; {detail}); rerun the same command to judge them again")


def make_panel(config: PanelConfig) -> JudgePanel:
    """A ready panel for `config`, warning on stderr when its prompt does not escape the data it shows."""
    panel = JudgePanel(config)
    if not panel.prompt.fenced:
        print(f"userturn: warning: judge prompt {panel.prompt.name} does not escape its data (no `| xml_text`), so "
              "a generated turn can close its tags; use it only to reproduce earlier verdicts", file=sys.stderr)
    return panel
