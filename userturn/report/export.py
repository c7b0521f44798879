"""Judged conversations as training data (TRL conversational JSONL).

* `sft`: `messages` = the probed conversation + the genuine follow-up as a user message, once per distinct
  conversation and turn (a repeat, e.g. the same greedy turn at two temperatures, is dropped and counted).
* `preference`: `prompt`, `chosen` (genuine) and `rejected` (degenerate) user turns of one context, the i-th genuine
  sample paired with the i-th degenerate one.
* `sft-human`: the conversation + the human's real next turn (`meta.second_turn`, MT-Bench), once per distinct
  unperturbed conversation; labels not needed.

`sft` and `preference` take the records of unperturbed contexts only (`none`) unless asked for others
(`perturbations`): a genuine follow-up to a falsified or generic assistant turn teaches reacting to that turn.
Their rows carry `key` (`chosen_key`, `rejected_key`), `model`, `dataset`, `perturbation` and `temperature` beside
the TRL fields.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from userturn.core.records import ProbeRecord
from userturn.core.taxonomy import is_followup

Format = Literal["sft", "preference", "sft-human"]
HUMAN_TURN = "second_turn"  # meta key of the human-written next user turn (MT-Bench)
DEFAULT_CONTEXTS = ("none",)  # the perturbations whose contexts `sft` and `preference` take unless asked
ALL = "all"  # as a perturbation asked for: every one


@dataclass
class ExportStats:
    """What an export used and what it skipped, and why."""

    records: int = 0
    written: int = 0
    skipped_error: int = 0
    skipped_unlabeled: int = 0
    skipped_not_genuine: int = 0
    unpaired: int = 0
    skipped_no_human_turn: int = 0
    skipped_perturbed: int = 0
    duplicates: int = 0
    by_label: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def context_key(record: ProbeRecord) -> tuple[str, str, str, str, str, float]:
    """The record's identity without the sample index: samples sharing it saw the same conversation."""
    return (record.model, record.dataset, record.item_id, record.mode, record.perturbation, record.temperature)


def _conversation(record: ProbeRecord) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.content} for m in record.messages]


def _usable(records: Iterable[ProbeRecord], stats: ExportStats,
            perturbations: Collection[str] = DEFAULT_CONTEXTS) -> list[ProbeRecord]:
    usable = []
    for record in records:
        stats.records += 1
        if ALL not in perturbations and record.perturbation not in perturbations:
            stats.skipped_perturbed += 1
        elif record.status != "ok" or record.user_turn is None:
            stats.skipped_error += 1
        elif record.label is None:
            stats.skipped_unlabeled += 1
        else:
            stats.by_label[record.label] += 1
            usable.append(record)
    return usable


def _about(record: ProbeRecord) -> dict[str, Any]:
    """What a training row says of where it came from."""
    return {"model": record.model, "dataset": record.dataset, "perturbation": record.perturbation,
            "temperature": record.temperature}


def sft_rows(records: Iterable[ProbeRecord], stats: ExportStats,
             perturbations: Collection[str] = DEFAULT_CONTEXTS) -> list[dict[str, Any]]:
    rows = []
    seen: set[bytes] = set()
    for record in _usable(records, stats, perturbations):
        if not is_followup(record.label):
            stats.skipped_not_genuine += 1
            continue
        messages = [*_conversation(record), {"role": "user", "content": record.user_turn}]
        identity = orjson.dumps(messages)
        if identity in seen:
            stats.duplicates += 1
            continue
        seen.add(identity)
        rows.append({"id": record.item_id, "messages": messages, "key": record.key, **_about(record)})
    return rows


def preference_rows(records: Iterable[ProbeRecord], stats: ExportStats,
                    perturbations: Collection[str] = DEFAULT_CONTEXTS) -> list[dict[str, Any]]:
    groups: dict[tuple, list[ProbeRecord]] = defaultdict(list)
    for record in _usable(records, stats, perturbations):
        groups[context_key(record)].append(record)
    rows = []
    for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
        group = sorted(groups[key], key=lambda r: r.sample)
        genuine = [r for r in group if is_followup(r.label)]
        degenerate = [r for r in group if not is_followup(r.label)]
        pairs = min(len(genuine), len(degenerate))
        stats.unpaired += len(group) - 2 * pairs
        for good, bad in zip(genuine[:pairs], degenerate[:pairs], strict=True):
            rows.append({
                "id": good.item_id,
                "prompt": _conversation(good),
                "chosen": [{"role": "user", "content": good.user_turn}],
                "rejected": [{"role": "user", "content": bad.user_turn}],
                "chosen_key": good.key, "rejected_key": bad.key, **_about(good),
            })
    return rows


def human_turn(record: ProbeRecord) -> str | None:
    """The human-written next user turn the dataset carries for this conversation (MT-Bench), if any."""
    value = (record.meta or {}).get(HUMAN_TURN)
    return value if isinstance(value, str) and value.strip() else None


def human_sft_rows(records: Iterable[ProbeRecord], stats: ExportStats) -> list[dict[str, Any]]:
    """The probed conversation followed by the human's real next turn: one row per distinct conversation."""
    rows = []
    seen: set[bytes] = set()
    for record in records:
        stats.records += 1
        turn = human_turn(record)
        if turn is None:
            stats.skipped_no_human_turn += 1
            continue
        if record.perturbation != "none":
            stats.skipped_perturbed += 1
            continue
        messages = [*_conversation(record), {"role": "user", "content": turn}]
        key = orjson.dumps(messages)
        if key in seen:
            stats.duplicates += 1
            continue
        seen.add(key)
        rows.append({"id": record.item_id, "messages": messages})
    return rows


def export_rows(records: Iterable[ProbeRecord], fmt: Format,
                perturbations: Collection[str] = DEFAULT_CONTEXTS) -> tuple[list[dict[str, Any]], ExportStats]:
    """Training rows in `fmt` plus counts of what was skipped; `perturbations`: the contexts `sft` and
    `preference` take (`all`: every one; `sft-human` takes unperturbed conversations only)."""
    stats = ExportStats()
    if fmt == "sft-human":
        rows = human_sft_rows(records, stats)
    else:
        rows = {"sft": sft_rows, "preference": preference_rows}[fmt](records, stats, perturbations)
    stats.written = len(rows)
    return rows, stats
