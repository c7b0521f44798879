"""Which rows a report shows, and in which order: `report --model/--dataset/--perturb/--temperature` and
`--model-order`. Filters pick rows after every number is computed (a perturbed row keeps its Δ vs none when the
none row is filtered out); a model or dataset filter is a shell pattern matched against the whole name, several
values of one filter are alternatives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel

from userturn.client.terminal import matching
from userturn.core.errors import UserError
from userturn.core.records import temperature_value
from userturn.report.model_size import order_models
from userturn.report.summary import GroupSummary


class RowFilter(BaseModel):
    """The report's row filters (empty: every row) and the model order override."""

    models: list[str] = []
    datasets: list[str] = []
    perturbations: list[str] = []
    temperatures: list[float] = []
    model_order: list[str] = []

    @property
    def active(self) -> bool:
        return bool(self.models or self.datasets or self.perturbations or self.temperatures)

    def describe(self) -> str:
        """The filters as the flags that set them (for a report's heading): '' when none is set."""
        parts = [f"--model {m}" for m in self.models] + [f"--dataset {d}" for d in self.datasets]
        parts += [f"--perturb {p}" for p in self.perturbations] + [f"--temperature {t:g}" for t in self.temperatures]
        return " ".join(parts)


def row_order(groups: Sequence[GroupSummary], model_order: Sequence[str] = ()) -> list[GroupSummary]:
    """The rows by model size (or `model_order`), dataset, mode, `none` first, perturbation, temperature."""
    rank = {m: i for i, m in enumerate(order_models((g.model for g in groups), model_order))}
    return sorted(groups, key=lambda g: (rank[g.model], g.dataset, g.mode, g.perturbation != "none", g.perturbation,
                                         g.temperature, g.settings))


def at_temperatures(asked: Sequence[float], present: set[float], what: str) -> Callable[[float], bool]:
    """`--temperature T...` as a test on a temperature (every one passes when none is asked); UserError naming the
    temperatures present when an asked one matches no `what` (row, record)."""
    wanted = {temperature_value(t) for t in asked}
    have = {temperature_value(t) for t in present}
    for t in asked:
        if temperature_value(t) not in have:
            shown = ", ".join(f"{h:g}" for h in sorted(present)) or "none"
            raise UserError(f"--temperature {t:g}: no {what} at that temperature (present: {shown})")
    return lambda temperature: not asked or temperature_value(temperature) in wanted


def select_groups(groups: Sequence[GroupSummary], rows: RowFilter) -> list[GroupSummary]:
    """The rows the filters keep, in `row_order`. UserError when a filter matches nothing."""
    models = matching("--model", rows.models, {g.model for g in groups})
    datasets = matching("--dataset", rows.datasets, {g.dataset for g in groups})
    perturbations = matching("--perturb", rows.perturbations, {g.perturbation for g in groups})
    at = at_temperatures(rows.temperatures, {g.temperature for g in groups}, "row")
    kept = [g for g in groups if g.model in models and g.dataset in datasets and g.perturbation in perturbations
            and at(g.temperature)]
    if not kept:
        raise UserError(f"no row matches all of {rows.describe()}")
    return row_order(kept, rows.model_order)
