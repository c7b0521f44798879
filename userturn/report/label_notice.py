"""What every report format says when its rates are not (all) a measurement: records no judge model labelled
(rules only, or nothing at all), or records a judge failed on, with the one command that labels exactly those.

A judge's failures are not a random subset (long turns, hostile text, replies cut by the token limit), so they can
bias a rate that leaves them out. Up to `FAILURE_SHARE` of a row's generated records that bias is at most about
as large as the sampling error of a usual row (±5 pp: a 95% CI half-width at a few hundred records); above it the
report says so above the table, not only in a column.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from userturn.core.results_files import JUDGED_SUFFIX
from userturn.judges.prompt import DEFAULT_PROMPT, packaged_names, packaged_prompt
from userturn.report.summary import GroupSummary
from userturn.report.table import fmt_temp

FAILURE_SHARE = 0.05  # of a row's generated records: a judge failure share above it is a notice above the table
PathLike = str | Path


@dataclass(frozen=True)
class LabelNotice:
    """`text`: the full notice (terminal, HTML); `caveat`: the same in one or two sentences, for a table's caption;
    `above`: whether it belongs above the table (no rate is a measurement, or some may be biased)."""

    text: str
    caveat: str
    above: bool


def judge_sources(named: PathLike | Sequence[PathLike]) -> list[str]:
    """The files `userturn judge` should read to label what the named (judged) files lack: X.jsonl for a judged
    copy X.judged.jsonl beside it (its output is that copy again, never X.judged.judged.jsonl); any other file or
    folder as named (a folder's judged copies are skipped and rewritten in place)."""
    items = [named] if isinstance(named, str | Path) else list(named)
    out = []
    for item in map(Path, items):
        if item.name.endswith(JUDGED_SUFFIX):
            source = item.with_name(item.name[: -len(JUDGED_SUFFIX)] + ".jsonl")
            if source.is_file():
                item = source
        out.append(str(item))
    return list(dict.fromkeys(out))


def _prompt_flag(shas: set[str]) -> str:
    """`--judge-prompt` for the prompt the panel used ('' for the default; a placeholder for a file not shipped)."""
    if not shas:
        return ""
    for name in packaged_names():
        if packaged_prompt(name).sha256[:12] in shas:
            return "" if name == DEFAULT_PROMPT else f" --judge-prompt {name.removesuffix('.md')}"
    return " --judge-prompt FILE.md"


def retry_command(groups: Sequence[GroupSummary], named: PathLike | Sequence[PathLike]) -> str:
    """The one command that asks the judge panel again for exactly the records it failed on: `userturn judge` on
    the source files (records with an ok verdict are kept, no request sent), writing the judged copies again. The
    judges are named in name order (the records do not keep the panel's order, which breaks majority ties)."""
    panel = sorted({p for g in groups if g.judge_failures for p in g.judge_panel})
    models = list(dict.fromkeys(p.split("@", 1)[0] for p in panel)) or ["NAME"]
    prompt = _prompt_flag({p.split("@", 1)[1] for p in panel if "@" in p})
    files = " ".join(shlex.quote(f) for f in judge_sources(named))
    judges = " ".join(f"--judge-model {shlex.quote(m)}" for m in models)
    out = ""
    items = [named] if isinstance(named, str | Path) else list(named)
    if len(items) == 1 and Path(items[0]).name.endswith(JUDGED_SUFFIX) and \
            judge_sources(named) == [str(items[0])]:  # a judged copy without its source: a new copy
        copy = Path(items[0])
        out = " --out " + shlex.quote(str(copy.with_name(copy.name[: -len(JUDGED_SUFFIX)] + ".retried.jsonl")))
    return f"userturn judge {files}{out} --judge-base-url URL {judges}{prompt}"  # one URL serves every judge


def _failure_notice(groups: Sequence[GroupSummary], named: PathLike | Sequence[PathLike],
                    retry: str | None = None) -> LabelNotice:
    failures = sum(g.judge_failures for g in groups)
    generated = sum(g.n + g.judge_failures + g.unjudged for g in groups)
    share = failures / generated if generated else 1.0
    judged = any(g.n > g.rule_labels for g in groups)
    biased = [g for g in groups if g.judge_failures > FAILURE_SHARE * (g.n + g.judge_failures)]
    command = retry or retry_command(groups, named)
    head = f"the judge failed on {failures} of {generated} generated records ({100 * share:.0f}%; outside n)"
    if not judged:
        why = "no judge model labelled any record, so no rate here is a measurement"
    elif biased:
        worst = max(biased, key=lambda g: g.judge_failures / (g.n + g.judge_failures))
        why = (f"in {len(biased)} row{'s' if len(biased) != 1 else ''} more than {100 * FAILURE_SHARE:.0f}% of the "
               f"generated records are missing from n (worst: {worst.series} · T={fmt_temp(worst.temperature)}, "
               f"{worst.judge_failures} of {worst.n + worst.judge_failures}); the records a judge fails on are not a "
               "random subset, so those rates may be biased")
    else:
        why = ""
    unjudged = sum(g.unjudged for g in groups)
    more = f"; {unjudged} more records are unjudged (no judge asked)" if unjudged else ""
    text = f"{head}{more}{'; ' + why if why else ''}. Retry exactly those (keeps every ok verdict): {command}"
    caveat = (f"The judge failed on {failures} of {generated} generated records (outside n)"
              + (f"; {why}" if why else "") + f". Retry: {command}")
    return LabelNotice(text, caveat, above=bool(biased) or not judged)


def label_notice(groups: Sequence[GroupSummary], named: PathLike | Sequence[PathLike],
                 retry: str | None = None) -> LabelNotice | None:
    """The notice for a report of the files `named` (as the command line named them): judge failures first (with
    the command that retries exactly those records: `retry` where the screen names one already, else `userturn
    judge` on the source files), else records labelled by rules only or by nothing, else
    unjudged records; None when a judge model labelled every generated record."""
    if any(g.judge_failures for g in groups):
        return _failure_notice(groups, named, retry)
    unjudged, total = sum(g.unjudged for g in groups), sum(g.records for g in groups)
    files = " ".join(shlex.quote(f) for f in judge_sources(named))
    how = f"add a judge: userturn judge {files} --judge-base-url URL --judge-model NAME, then report the judged file"
    if not any(g.n for g in groups):
        if not unjudged:
            return None
        return LabelNotice(f"none of the {total} records is labelled yet (no rule fired and no judge model labelled "
                           f"them); {how}.", "No record is labelled by a judge model: not a measurement.", above=True)
    if not any(g.n > g.rule_labels for g in groups):
        return LabelNotice(
            f"labelled by rules only: {unjudged} of {total} records are unjudged (no rule fired and no judge model "
            "labelled them). The rules never label a genuine follow-up, so the follow-up rates here count only "
            f"rule-labelled records and are not a measurement; {how}.",
            "Labelled by rules only (they never label a genuine follow-up): not a measurement.", above=False)
    if not unjudged:
        return None
    return LabelNotice(f"{unjudged} of {total} records are unjudged (outside n, the last number under excluded); to "
                       f"label them {how}.", f"{unjudged} of {total} records are unjudged (outside n).", above=False)
