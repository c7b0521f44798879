"""`userturn show`: generated user turns as a table beside the human's real next turn where the dataset has one
(`turns_tables`, over the stream of `show_scan`), or one record whole with its exact prompt (`record_view`)."""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
from pydantic import BaseModel
from rich.table import Table

from userturn.client.render.prompt_replay import ReplayedPrompt
from userturn.core.records import ConfigLine, ProbeRecord
from userturn.report.export import human_turn

CLIP = 160
MODEL_WIDTH = 14  # model names wrap at their separators (`/`, `-`) to this width, never mid-word where avoidable


def clip(text: str | None, limit: int = CLIP) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def last_user_query(record: ProbeRecord) -> str:
    return next((m.content for m in reversed(record.messages) if m.role == "user"), "")


class ShowFilter(BaseModel):
    """`userturn show`'s row filters, those of `userturn report` and more: shell patterns (`Qwen/*`, `*-9B`) matched
    against the whole value, temperatures as numbers; several values of one filter are alternatives. A record
    without a label matches `judge_failed` when its judgement failed, else `unjudged`."""

    models: list[str] = []
    datasets: list[str] = []
    labels: list[str] = []
    perturbations: list[str] = []
    temperatures: list[float] = []
    items: list[str] = []


def label_of(record: ProbeRecord) -> str:
    """The label, or what stands in for a missing one: `judge_failed` (the judgement failed) or `unjudged`."""
    return record.label or ("judge_failed" if record.judge_status == "error" else "unjudged")


def detail_text(detail: Mapping[str, Any] | None, limit: int = 40) -> str:
    """A perturbation's detail in a few characters: `72 → 75` for a changed number, else its fields."""
    if not detail:
        return ""
    if "original" in detail and "new" in detail:
        return f"{detail['original']} → {detail['new']}"
    return clip(", ".join(f"{k}={v}" for k, v in detail.items()), limit)


def verdict_of(record: ProbeRecord) -> str:
    """The label and its source (`genuine_followup (judge)`), or `judge_failed`, or `unjudged`."""
    if record.label:
        return f"{record.label} ({record.label_source})" if record.label_source else record.label
    return label_of(record)


COMPACT_BELOW = 140  # terminal columns under which a row's identity shares one cell (no word is cut)


TABLE_ROWS = 100  # the table is printed in blocks of this many rows, each as soon as its records are read


def turns_tables(records: Iterable[ProbeRecord], *, count: int, with_human: bool, short_key: Callable[[str], str],
                 title: str, limit: int | None = None, width: int = 200) -> Iterator[Table]:
    """The table of ok `records` (in file order; `count` of them in all), in blocks of TABLE_ROWS rows: short key,
    model, item, T, sample, perturbation (and what it changed), query, generated turn, human turn (`with_human`),
    label. Under COMPACT_BELOW columns (`width`) model, item, T, sample and perturbation share one cell. Every block
    has the first block's column widths (each column fits its longest word there), so the blocks read as one."""
    from userturn.client.terminal import wrap_name

    shown = min(count, limit) if limit is not None else count
    more = f" (first {shown} of {count})" if shown < count else ""
    compact = width < COMPACT_BELOW
    widths: dict[str, int] = {}

    def perturb(r: ProbeRecord) -> str:
        return r.perturbation + (f"\n{detail_text(r.perturbation_detail)}" if r.perturbation_detail else "")

    def where(r: ProbeRecord) -> str:
        return f"{wrap_name(r.model, MODEL_WIDTH)}\n{r.item_id} T={r.temperature:g} s={r.sample}\n{perturb(r)}"

    stream = iter(records)
    blocks = iter(lambda: tuple(itertools.islice(stream, TABLE_ROWS)), ())
    for n, block in enumerate(itertools.chain(blocks, [()] if not shown else [])):
        table = Table(title=title + more if n == 0 else None, title_justify="left", header_style="bold",
                      show_lines=True, show_header=n == 0, width=width)
        cells: dict[str, list[str]] = {"key": [short_key(r.key) for r in block]}
        if compact:
            cells["condition"] = [where(r) for r in block]  # model, item T s, perturbation
        else:
            cells |= {"model": [wrap_name(r.model, MODEL_WIDTH) for r in block], "item": [r.item_id for r in block],
                      "T": [f"{r.temperature:g}" for r in block], "s": [str(r.sample) for r in block],
                      "perturb": [perturb(r) for r in block]}
        texts = {"user query": [clip(last_user_query(r), CLIP // 2) for r in block],
                 "generated user turn": [clip(r.user_turn) for r in block]}
        if with_human:
            texts["human next turn"] = [clip(human_turn(r)) for r in block]
        cells |= texts
        cells["label"] = [verdict_of(r).replace(" (", "\n(") for r in block]
        for name, column in cells.items():
            if name not in texts and name not in widths:
                words = [word for cell in [name, *column] for word in cell.split()]  # the header's too
                widths[name] = min(max(map(len, words)), 24)
            table.add_column(name, overflow="fold", ratio=1 if name in texts else None,
                             width=None if name in texts else widths[name])
        for row in zip(*cells.values(), strict=True):
            table.add_row(*row)
        yield table


def _section(title: str) -> str:
    return f"── {title} " + "─" * max(3, 76 - len(title))


def record_view(record: ProbeRecord, prompt: ReplayedPrompt | None, prompt_problem: str | None = None,
                config: ConfigLine | None = None) -> str:
    """The record as a person reads it: identity, the run of its configuration line, the exact prompt as sent
    (between two rules; else `prompt_problem`), the generated and human turns, the reference, every verdict."""
    lines = [f"record       {record.key}",
             f"model        {record.model}    dataset {record.dataset}    item {record.item_id}",
             f"mode         {record.mode}    perturbation {record.perturbation}    temperature {record.temperature!r}"
             f"    sample {record.sample}    seed {record.seed}",
             *([f"perturbed    {orjson.dumps(record.perturbation_detail).decode()}"] if record.perturbation_detail
               else []),
             f"status       {record.status}" + (f" ({record.error})" if record.error else "")
             + (f"    finish_reason {record.finish_reason}" if record.finish_reason else "")
             + (f"    matched_stop {record.matched_stop!r}" if record.matched_stop is not None else "")]
    if record.config_fingerprint:
        lines.append(f"config       {record.config_fingerprint}")
    if config is not None and config.run is not None:
        run = config.run
        lines.append(f"run          userturn {run.userturn_version} on {run.host}, started {run.started}: "
                     f"{shlex.join(run.command)}")
    if record.usage is not None and record.usage.total_tokens is not None:
        lines.append(f"tokens       prompt {record.usage.prompt_tokens}, completion {record.usage.completion_tokens}")
    if prompt is None:
        lines += [_section("prompt"), f"(not shown: {prompt_problem or 'unknown'})"]
    else:
        where = "POST /completions `prompt`" if prompt.mode == "raw" else "POST /chat/completions `messages`"
        if prompt.verified:
            check = f"sha256 {prompt.sha256[:16]}… = the record's prompt_sha256"
        elif prompt.recorded_sha256 is None:
            check = "UNVERIFIED: the record has no prompt_sha256"
        else:
            check = (f"MISMATCH: sha256 {prompt.sha256[:16]}… but the record's is {prompt.recorded_sha256[:16]}…; "
                     "this is not the prompt that was sent")
        lines.append(_section(f"prompt as sent ({where}, {len(prompt.text)} chars; {check})"))
        lines.append(prompt.text if prompt.mode == "raw"
                     else orjson.dumps(prompt.messages, option=orjson.OPT_INDENT_2).decode())
        lines.append(_section("end of prompt"))
    lines += [_section("generated user turn"), record.user_turn if record.user_turn is not None else "(none)"]
    human = human_turn(record)
    if human is not None:
        lines += [_section("human next turn (the dataset's, meta.second_turn)"), human]
    if record.reference_answer is not None:
        correct = {True: "correct", False: "wrong", None: "not scored"}[record.correct]
        lines += [_section(f"reference answer (assistant turn {correct})"), record.reference_answer]
    lines.append(_section(f"verdicts: {verdict_of(record)}"))
    if not record.judges:
        lines.append("(no verdicts)")
    for v in record.judges:
        head = f"{v.judge} [{v.source}]: " + (v.label or "—") if v.status == "ok" else f"{v.judge}: ERROR {v.error}"
        if v.prompt_sha256:
            head += f"  (judge prompt sha256 {v.prompt_sha256[:12]})"
        lines.append(head)
        if v.rationale:
            lines.append("    " + v.rationale.replace("\n", "\n    "))
        if v.status == "error" and v.raw:
            lines.append("    raw: " + v.raw.replace("\n", "\n    "))
    return "\n".join(lines) + "\n"
