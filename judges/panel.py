"""A panel of one or more judges plus the rule pre-labels: the object that labels a `ProbeRecord`.

`JudgePanel.judge(record)` is what `userturn probe` (inline) and `userturn judge` (afterwards) call.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import BaseModel, Field
from userturn.client.errors import UserError
from userturn.client.records import JudgeVerdict, ProbeRecord
from userturn.judges.agreement import majority_label
from userturn.judges.llm_judge import JudgeConfig, LLMJudge
from userturn.judges.prelabel import RESTATE_THRESHOLD, prelabel, query_and_response
from userturn.judges.prompt import JudgePrompt, load_prompt


@dataclass
class JudgeCounters:
    """Live counts for the progress view (records, not HTTP calls)."""

    judged: int = 0  # records labelled by the judge panel
    judge_failures: int = 0  # records no judge could label (judge_status "error")
    rule_labels: int = 0  # records labelled by a pre-label rule
    verdict_errors: int = 0  # single judge verdicts that failed (the record may still have a majority)
    labels: dict[str, int] = field(default_factory=dict)

    def followup_rate(self) -> float | None:
        labelled = sum(self.labels.values())
        return self.labels.get("genuine_followup", 0) / labelled if labelled else None


class PanelConfig(BaseModel):
    judges: list[JudgeConfig] = Field(min_length=1)
    judge_all: bool = Field(default=False, description="send rule-labelled records to the judges too")
    force: bool = Field(default=False, description="re-ask judges that already have an ok verdict on the record")
    keep_other_verdicts: bool = Field(default=False, description="keep (non-voting) verdicts of other judges")
    restate_threshold: float = Field(default=RESTATE_THRESHOLD, gt=0, le=1)
    prompt_path: Path | None = None


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

    def is_done(self, record: ProbeRecord) -> bool:
        """Nothing left to do: no generation, a rule label (unless judge_all), or an ok verdict from every judge."""
        if record.status != "ok":
            return True
        if record.label_source == "rule" and not self.config.judge_all:
            return True
        have = {v.judge for v in record.judges if v.source == "judge" and v.status == "ok"}
        return all(name in have for name in self.names)

    async def judge(self, record: ProbeRecord) -> ProbeRecord:
        """A copy of `record` with `judges`, `label`, `label_source` and `judge_status` set.

        Records without a generation (status "error") come back unchanged. Verdicts of judges outside this
        panel are dropped, or kept without a vote when `keep_other_verdicts`. Raises EndpointError if a judge
        endpoint is unusable.
        """
        if record.status != "ok":
            return record
        out = record.model_copy(deep=True)
        panel = set(self.names)
        previous = [v for v in out.judges if v.source == "judge"]
        others = [v for v in previous if v.judge not in panel] if self.config.keep_other_verdicts else []
        kept = {v.judge: v for v in previous
                if v.judge in panel and v.status == "ok" and not self.config.force}
        rule = prelabel(out, self.config.restate_threshold)
        out.judges = [*others, *([rule] if rule else [])]
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
        if label is None:
            out.label, out.label_source, out.judge_status = None, None, "error"
        else:
            out.label = label  # type: ignore[assignment]
            out.label_source = "judge" if len(self.judges) == 1 else "majority"
            out.judge_status = "ok"
        self._count(out)
        return out

    def _count(self, record: ProbeRecord) -> None:
        c = self.counters
        if record.judge_status == "error":
            c.judge_failures += 1
            return
        if record.label_source == "rule":
            c.rule_labels += 1
        else:
            c.judged += 1
        if record.label:
            c.labels[record.label] = c.labels.get(record.label, 0) + 1


def _per_judge(values: list[str] | None, n: int, flag: str, default: str | None) -> list[str]:
    if not values:
        if default is None:
            raise UserError(f"{flag} is required with --judge-model")
        return [default] * n
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise UserError(f"give {flag} once, or once per --judge-model ({n}); got {len(values)}")
    return values


def panel_config_from_args(args: argparse.Namespace) -> PanelConfig | None:
    """The panel described by the judge flags; None when no --judge-model was given."""
    models: list[str] | None = getattr(args, "judge_model", None)
    if not models:
        if getattr(args, "judge_base_url", None):
            raise UserError("--judge-base-url given without --judge-model")
        return None
    urls = _per_judge(args.judge_base_url, len(models), "--judge-base-url", None)
    keys = _per_judge(args.judge_api_key_env, len(models), "--judge-api-key-env", "OPENAI_API_KEY")
    extra: dict = {}
    if args.judge_extra_body:
        try:
            extra = orjson.loads(args.judge_extra_body)
        except orjson.JSONDecodeError as exc:
            raise UserError(f"--judge-extra-body is not valid JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise UserError("--judge-extra-body must be a JSON object")
    for name, value in (("--judge-max-tokens", args.judge_max_tokens), ("--judge-concurrency", args.judge_concurrency)):
        if value < 1:
            raise UserError(f"{name} must be >= 1")
    judges = [
        JudgeConfig(model=m, base_url=u, api_key_env=k, temperature=args.judge_temperature,
                    max_tokens=max(16, args.judge_max_tokens), request_timeout=args.judge_timeout,
                    max_retries=max(0, args.judge_max_retries), reasks=max(0, args.judge_reasks),
                    concurrency=args.judge_concurrency, extra_body=extra)
        for m, u, k in zip(models, urls, keys, strict=True)
    ]
    return PanelConfig(judges=judges, judge_all=args.judge_all, force=bool(getattr(args, "force", False)),
                       prompt_path=args.judge_prompt)


def panel_from_args(args: argparse.Namespace) -> JudgePanel | None:
    """A ready panel from the judge flags, or None when judging was not asked for."""
    config = panel_config_from_args(args)
    return None if config is None else JudgePanel(config)
