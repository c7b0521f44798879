"""Summaries of results files: one row per model x dataset x mode x perturbation x temperature, configuration
(`config_fingerprint`) and judge panel. Follow-up rate = genuine_followup / labelled records (`n`); judge failures
and generation errors are counted beside it. Intervals are clustered by item (`report.stats`); each perturbed row
carries its paired difference to the `none` row of the same configuration.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, Field

from userturn.core.records import ProbeRecord
from userturn.core.results_files import as_paths, read_results
from userturn.core.taxonomy import LABELS, is_followup
from userturn.judges.agreement import PanelAgreement, agreements_from_patterns
from userturn.report.calibration import Calibration
from userturn.report.scan import RowId, Scan, base_name, row_and_outcome, scan_files
from userturn.report.stats import ItemTallies, clustered_rate, paired_difference

UNFINGERPRINTED = "unfingerprinted"


class GroupSummary(BaseModel):
    """One row of the report, and one object of `userturn report --json` (the issue's keys first, then mode,
    configuration, counts and flags: the fields' order)."""

    model: str
    dataset: str
    perturbation: str
    temperature: float
    n: int = Field(description="labelled records: the follow-up rate's denominator")
    items: int = Field(description="distinct items behind n")
    followups: int
    followup_rate: float | None
    ci_low: float | None = Field(description="item-clustered 95% interval (Wilson at the effective sample size)")
    ci_high: float | None
    delta_vs_none: float | None = Field(default=None, description="rate minus the none row's, over shared items")
    delta_ci_low: float | None = None
    delta_ci_high: float | None = None
    delta_items: int | None = Field(default=None, description="items labelled under both this row and none")
    delta_note: str | None = Field(default=None, description="why delta_vs_none is null")
    judge_failures: int
    labels: dict[str, int]
    accuracy: float | None = Field(description="task accuracy of the probed assistant turns: the mean over the row's "
                                           "scored items of each item's share of correct records")
    mode: str
    settings: str = Field(default="", description="what sets this row apart from rows that differ only in it")
    config_fingerprint: str | None
    config: dict | None
    records: int = Field(description="all records of the row")
    generation_errors: int
    unjudged: int = Field(description="generated but not (yet) judged")
    rule_labels: int
    accuracy_n: int = Field(description="distinct items with a task score (the unit: one assistant turn per item)")
    self_judged: int = Field(description="records labelled by a judge with the same model as the one probed")
    judges: list[str]
    judge_panel: list[str] = Field(description="LLM judges asked, as judge@prompt-sha256-prefix")
    design_effect: float | None = Field(description="variance inflation from the samples of an item, >= 1")
    prompt_tokens: int = Field(default=0, description="prompt tokens of the row's probe requests (records' usage)")
    completion_tokens: int = Field(default=0, description="completion tokens of the row's probe requests")
    usage_records: int = Field(default=0, description="records of the row that carry a usage report")
    followup_corrected: float | None = Field(default=None, description="the follow-up rate corrected for the judge "
                                             "panel's measured error (Rogan-Gladen; `report --gold`)")
    corrected_ci_low: float | None = Field(default=None, description="95% interval of followup_corrected: sampling "
                                           "and calibration error (seeded parametric bootstrap)")
    corrected_ci_high: float | None = None
    corrected_note: str | None = Field(default=None, description="why followup_corrected is null despite gold")
    calibration: Calibration | None = Field(default=None, description="the row's judge panel against the gold labels")

    @property
    def series(self) -> str:
        """Row identity without the temperature (one line in the temperature plot)."""
        name = f"{self.model} · {self.dataset} · {self.mode} · {self.perturbation}"
        return f"{name} · {self.settings}" if self.settings else name


def is_self_judged(record: ProbeRecord) -> bool:
    """True when an ok LLM verdict on the record came from the probed model itself (names compared loosely)."""
    base = base_name(record.model)
    return any(v.source == "judge" and v.status == "ok" and base_name(v.judge) == base for v in record.judges)


@dataclass
class Report:
    """The report of one results file: rows, judge agreement, and which lines counted (for the HTML pass)."""

    groups: list[GroupSummary]
    agreements: list[PanelAgreement]
    records: int
    keep: np.ndarray
    tallies: dict[int, ItemTallies]  # per final row index (same order as `groups`): item-level counts
    superseded: int = 0  # record lines replaced by a later line of the same key and configuration (not counted)
    quote_reasks: int = 0  # judge replies asked again because they held only a quoted verdict or two verdicts


def _flatten(config: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(config, dict):
        out: dict[str, str] = {}
        for k, v in config.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: "{}"}
    key = prefix[:-1]
    if isinstance(config, str):
        return {key: config[:12] if key.endswith("sha256") else config}  # hashes: a prefix tells them apart
    return {key: orjson.dumps(config).decode()}


def _without_perturbation(config: Any) -> Any:
    """The config with every setting named after the perturbation removed (what a none row must share)."""
    if isinstance(config, dict):
        return {k: _without_perturbation(v) for k, v in config.items() if "perturb" not in k.lower()}
    return config


def _panel_names(panel: tuple[tuple[str, str | None], ...]) -> list[str]:
    return [f"{judge}@{sha[:12]}" if sha else judge for judge, sha in panel]


def _merge_panels(scan: Scan, present: np.ndarray) -> np.ndarray:
    """Row index -> final row index: records no LLM judge saw (rule labels, unjudged, errors) join their
    configuration's judged row when exactly one judge panel judged it; with several panels they stay apart."""
    row_list = list(scan.rows)
    target = np.arange(len(row_list), dtype=np.int64)
    panels: dict[tuple, list[int]] = defaultdict(list)
    for r in present.tolist():
        if row_list[r].panel:
            panels[row_list[r].group, row_list[r].fingerprint].append(r)
    for r in present.tolist():
        judged = panels.get((row_list[r].group, row_list[r].fingerprint), [])
        if not row_list[r].panel and len(judged) == 1:
            target[r] = judged[0]
    return target


def _settings(rows: list[RowId], configs: dict[str, dict | None]) -> dict[RowId, str]:
    """For rows that share model, dataset, mode and perturbation (at any temperature, so a configuration is named
    the same way at every temperature): what tells their configurations and judge panels apart."""
    out: dict[RowId, str] = {}
    buckets: dict[tuple, list[RowId]] = defaultdict(list)
    for row in rows:
        buckets[row.group.series].append(row)
    for members in buckets.values():
        if len({(row.fingerprint, row.panel) for row in members}) == 1:
            out.update(dict.fromkeys(members, ""))
            continue
        flat = {row: _flatten(configs.get(row.fingerprint)) if row.fingerprint else {} for row in members}
        keys = sorted({k for f in flat.values() for k in f})
        differing = [k for k in keys if len({f.get(k) for row, f in flat.items() if row.fingerprint}) > 1]
        fingerprints = {row.fingerprint for row in members}
        panels = {row.panel for row in members}
        for row in members:
            parts = []
            if len(fingerprints) > 1:
                if row.fingerprint is None:
                    parts.append(UNFINGERPRINTED)
                else:
                    shown = [f"{k}={flat[row].get(k, '∅')}" for k in differing]
                    parts.append(", ".join(shown) if shown else f"config {row.fingerprint}")
            if len(panels) > 1:
                parts.append("judges " + (", ".join(_panel_names(row.panel)) or "none"))
            out[row] = "; ".join(parts)
    return out


def _pair_key(row: RowId, configs: dict[str, dict | None]) -> tuple:
    config = configs.get(row.fingerprint) if row.fingerprint else None
    identity = None if row.fingerprint is None else (
        orjson.dumps(_without_perturbation(config), option=orjson.OPT_SORT_KEYS) if config is not None
        else row.fingerprint)
    return (row.group.unperturbed(), identity, row.panel)


def _row_tallies(rows: np.ndarray, items: np.ndarray, followup: np.ndarray, labelled: np.ndarray,
                 present: list[int]) -> dict[int, ItemTallies]:
    """Per row: (followups, labelled) of each distinct item. One stable sort by row, then a small unique per row."""
    order = np.argsort(rows, kind="stable")
    bounds = np.searchsorted(rows[order], np.arange(max(present, default=-1) + 2))
    out = {}
    for r in present:
        sub = order[bounds[r]:bounds[r + 1]]
        unique, inverse = np.unique(items[sub], return_inverse=True)
        y = np.bincount(inverse, weights=followup[sub], minlength=len(unique)).astype(np.int32)
        m = np.bincount(inverse, weights=labelled[sub], minlength=len(unique)).astype(np.int32)
        out[r] = ItemTallies(unique, y, m)
    return out


def _item_accuracy(rows: np.ndarray, items: np.ndarray, correct: np.ndarray, scored: np.ndarray,
                   present: list[int]) -> dict[int, tuple[float, int]]:
    """Per row with a task score: (accuracy, scored items). Every sample of an item in a row probes the same
    assistant turn, so the unit is the item: each scored item counts once, with its share of correct records."""
    out: dict[int, tuple[float, int]] = {}
    for r, tally in _row_tallies(rows, items, correct, scored, present).items():
        shares = tally.followups[tally.labelled > 0] / tally.labelled[tally.labelled > 0]
        if len(shares):
            out[r] = (math.fsum(shares.tolist()) / len(shares), len(shares))  # fsum: any file order
    return out


def build_report(scan: Scan) -> Report:
    """Rows, intervals, paired deltas and agreement from one scan (last line per key counts)."""
    keep = scan.keep_mask()
    row_list, outcome_list, configs = list(scan.rows), list(scan.outcomes), scan.configs
    rows_raw, items, codes, tokens = scan.kept_columns(keep)
    rows = _merge_panels(scan, np.unique(rows_raw))[rows_raw].astype(np.int32)
    del rows_raw
    n_rows, n_out = len(row_list), max(1, len(outcome_list))

    def table(fn: Any) -> np.ndarray:
        return np.array([fn(o) for o in outcome_list] or [0], dtype=np.int64)

    # One histogram of (row, outcome) answers every count; `counts` is keyed by GroupSummary field.
    hist = np.bincount(rows.astype(np.int64) * n_out + codes, minlength=n_rows * n_out).reshape(n_rows, n_out)
    counts = {name: hist @ table(fn) for name, fn in {
        "n": lambda o: o.label is not None,
        "followups": lambda o: is_followup(o.label),
        "judge_failures": lambda o: o.ok and o.judge_error,
        "generation_errors": lambda o: not o.ok,
        "unjudged": lambda o: o.ok and o.label is None and not o.judge_error,
        "rule_labels": lambda o: o.rule,
        "self_judged": lambda o: o.self_judged,
    }.items()}
    counts["records"] = hist.sum(axis=1)
    counts["prompt_tokens"] = np.bincount(rows, weights=tokens[:, 0], minlength=n_rows).astype(np.int64)
    counts["completion_tokens"] = np.bincount(rows, weights=tokens[:, 1], minlength=n_rows).astype(np.int64)
    counts["usage_records"] = np.bincount(rows, weights=tokens.any(axis=1), minlength=n_rows).astype(np.int64)
    del tokens
    label_counts = {label: hist @ table(lambda o, label=label: o.label == label) for label in LABELS}
    pattern_counts: Counter = Counter()
    per_outcome = hist.sum(axis=0)
    quote_reasks = int(per_outcome @ table(lambda o: o.quote_reasks))
    for code, count in enumerate(per_outcome.tolist()):
        if count:
            pattern_counts[outcome_list[code].agreement] += count

    present = np.unique(rows).tolist()
    tallies = _row_tallies(rows, items, table(lambda o: is_followup(o.label)).astype(np.int8)[codes],
                           table(lambda o: o.label is not None).astype(np.int8)[codes], present)
    accuracy = _item_accuracy(rows, items, table(lambda o: o.correct is True).astype(np.int8)[codes],
                              table(lambda o: o.correct is not None).astype(np.int8)[codes], present)
    del rows, items, codes

    final_rows = sorted(present, key=lambda r: (row_list[r].group, row_list[r].fingerprint or "",
                                                _panel_names(row_list[r].panel)))
    settings = _settings([row_list[r] for r in final_rows], configs)
    groups: list[GroupSummary] = []
    for r in final_rows:
        row = row_list[r]
        rate = clustered_rate(tallies[r].followups, tallies[r].labelled)
        accuracy_value, accuracy_n = accuracy.get(r, (None, 0))
        groups.append(GroupSummary(
            **row.group._asdict(), **{name: int(column[r]) for name, column in counts.items()},
            items=rate.items if rate else 0, followup_rate=rate.rate if rate else None,
            ci_low=rate.ci_low if rate else None, ci_high=rate.ci_high if rate else None,
            design_effect=rate.design_effect if rate else None,
            labels={label: int(label_counts[label][r]) for label in LABELS}, accuracy=accuracy_value,
            accuracy_n=accuracy_n, judges=sorted({j for j, _ in row.panel}), judge_panel=_panel_names(row.panel),
            config_fingerprint=row.fingerprint, config=configs.get(row.fingerprint) if row.fingerprint else None,
            settings=settings[row],
        ))
    _add_deltas(groups, [row_list[r] for r in final_rows], [tallies[r] for r in final_rows], configs)
    return Report(groups=groups, agreements=agreements_from_patterns(pattern_counts), records=int(keep.sum()),
                  keep=keep, tallies={i: tallies[r] for i, r in enumerate(final_rows)},
                  superseded=int(len(keep) - keep.sum()), quote_reasks=quote_reasks)


def _add_deltas(groups: list[GroupSummary], rows: list[RowId], tallies: list[ItemTallies],
                configs: dict[str, dict | None]) -> None:
    """delta_vs_none for every non-none row: paired against the none row of the same configuration and panel."""
    nones: dict[tuple, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        if row.group.perturbation == "none":
            nones[_pair_key(row, configs)].append(i)
    for i, (group, row) in enumerate(zip(groups, rows, strict=True)):
        if row.group.perturbation == "none":
            continue
        partners = nones.get(_pair_key(row, configs), [])
        if len(partners) != 1:
            group.delta_note = ("no none row with the same configuration and judge panel" if not partners
                                else "several none rows match; cannot pair")
            continue
        diff = paired_difference(tallies[i], tallies[partners[0]])
        group.delta_vs_none, group.delta_ci_low, group.delta_ci_high = diff.delta, diff.ci_low, diff.ci_high
        group.delta_items, group.delta_note = diff.items, diff.reason


def summarise_file(path: str | Path | Sequence[str | Path]) -> Report:
    """The report of a results file, or of several read as one (their concatenation, in order), in one streaming
    pass. Missing file or malformed line -> UserError naming file:line."""
    return build_report(scan_files(path))


def summarise(records: Iterable[ProbeRecord], configs: Mapping[str, dict] | None = None) -> list[GroupSummary]:
    """Rows of already-loaded records (same rules as `summarise_file`); `configs`: their file's configurations by
    fingerprint (`ReadReport.configs`), for the settings that tell rows apart."""
    scan = Scan()
    scan.configs.update(configs or {})
    for record in records:
        scan.add(record.model_dump(mode="json"))
    return build_report(scan).groups


def load_results(path: str | Path | Sequence[str | Path]) -> list[ProbeRecord]:
    """Every record (last line per key) of a results file, or of several read as one, all in memory (`summarise_file`
    streams); UserError for a missing file or malformed line."""
    records, _ = read_results(as_paths(path))
    return list(records.values())


def to_json_rows(groups: list[GroupSummary]) -> list[dict]:
    """The `--json` array (`GroupSummary`'s fields in order)."""
    return [g.model_dump() for g in groups]


def panel_agreements(records: Iterable[ProbeRecord]) -> list[PanelAgreement]:
    """`agreements_from_patterns` of loaded records, counted as the report counts them."""
    return agreements_from_patterns(Counter(row_and_outcome(r.model_dump(mode="json"))[1].agreement for r in records))
