"""The report's compact table: one line per model (and dataset, mode and settings where they vary), one column per
temperature, each cell the genuine follow-up rate with its item-clustered 95% interval. The unperturbed rows when
there are any (the headline metric); the full table carries every row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from userturn.report.summary import GroupSummary
from userturn.report.table import fmt_ci, fmt_rate, fmt_temp

NO_JUDGED_RATE = "no row is labelled by a judge model (the rules alone never label a genuine follow-up)"


@dataclass
class RateCell:
    """One temperature of one line: `text` ('—' without a judged rate) and `title` (what it rests on)."""

    text: str
    title: str


@dataclass
class RateLine:
    model: str
    dataset: str
    variant: str
    perturbation: str
    cells: list[RateCell]
    accuracy: str


@dataclass
class RateGrid:
    """`lines` in the rows' order within each dataset; which identity columns vary (the others are not shown);
    `why_empty` when no cell has a rate from a judge."""

    temperatures: list[float]
    lines: list[RateLine] = field(default_factory=list)
    datasets: bool = False
    variants: bool = False
    perturbations: bool = False
    why_empty: str = ""

    @property
    def labels(self) -> list[str]:
        return [fmt_temp(t) for t in self.temperatures]


def _cell(g: GroupSummary | None) -> RateCell:
    if g is None:
        return RateCell("", "no row at this temperature")
    if g.followup_rate is None:
        return RateCell("—", "no labelled record")
    if g.n <= g.rule_labels:
        return RateCell("—", f"labelled by rules only ({g.n}): not a measurement")
    return RateCell(f"{fmt_rate(g.followup_rate)} ({fmt_ci(g)})",
                    f"{g.followups} of {g.n} labelled turns from {g.items} items")


def _accuracy(rows: Sequence[GroupSummary]) -> str:
    shown = sorted({fmt_rate(g.accuracy) for g in rows if g.accuracy is not None}, key=lambda s: float(s[:-1]))
    return "—" if not shown else shown[0] if len(shown) == 1 else f"{shown[0]}–{shown[-1]}"


def rate_grid(groups: Sequence[GroupSummary]) -> RateGrid:
    """The compact table of `groups` (already in the report's row order): the unperturbed rows if any, else all."""
    rows = [g for g in groups if g.perturbation == "none"] or list(groups)
    temperatures = sorted({g.temperature for g in rows})
    lines: dict[tuple[str, str, str, str], dict[float, GroupSummary]] = {}
    for g in rows:
        variant = " · ".join(p for p in (g.mode, g.settings) if p)
        lines.setdefault((g.dataset, g.model, variant, g.perturbation), {})[g.temperature] = g
    datasets = list(dict.fromkeys(g.dataset for g in rows))
    ordered = sorted(lines.items(), key=lambda kv: datasets.index(kv[0][0]))  # stable: model order kept within
    grid = RateGrid(temperatures=temperatures,
                    datasets=len(datasets) > 1,
                    variants=len({(k[1], k[2]) for k in lines}) > len({k[1] for k in lines}),
                    perturbations=len({k[3] for k in lines}) > 1 or rows[0].perturbation != "none" if rows else False)
    for (dataset, model, variant, perturbation), by_temp in ordered:
        grid.lines.append(RateLine(model=model, dataset=dataset, variant=variant, perturbation=perturbation,
                                   cells=[_cell(by_temp.get(t)) for t in temperatures],
                                   accuracy=_accuracy(list(by_temp.values()))))
    if not any(g.followup_rate is not None and g.n > g.rule_labels for g in rows):
        grid.why_empty = NO_JUDGED_RATE
    return grid
