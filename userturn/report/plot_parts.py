"""What the report figures share (userturn/report/plots.py draws them): matplotlib loaded on demand, one colour per
model, which rows a figure draws, panels, legends, axis ranges, and points drawn apart so none hides another."""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from userturn.core.errors import UserError
from userturn.core.records import temperature_value
from userturn.report.model_size import order_models
from userturn.report.stats import wilson_interval
from userturn.report.summary import GroupSummary
from userturn.report.table import fmt_temp

MATPLOTLIB_MISSING = "matplotlib is not installed (pip install matplotlib, or pip install 'userturn[plots]')"
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
DODGE_POINTS = 5.0  # points drawn at the same place are shifted this many typographic points apart
DODGE_SPAN = 24.0  # typographic points the models' series at one temperature spread over at most (horizontally)
PANELS_WIDE = 14.0  # inches of panels side by side at most (plus the legend's): wider figures get rows
EDGE = 0.025  # axes reach this share of their span beyond 0% and 100%: a point there is drawn whole
TITLE_CHARS_PER_INCH = 11.0  # a figure title (11 pt) is wrapped at about this many characters per inch of width
TEXT_CONTRAST = 3.0  # a model colour used for text is darkened until it has this contrast ratio on white


def matplotlib_missing() -> str | None:
    """Why no figure can be drawn here (matplotlib not importable), else None."""
    import importlib.util

    return MATPLOTLIB_MISSING if importlib.util.find_spec("matplotlib") is None else None


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError(f"no figures: {MATPLOTLIB_MISSING}") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def model_colors(models: Iterable[str], order: Sequence[str] = ()) -> dict[str, str]:
    """One colour per model (tab10, then tab20's others), in size order (`order` first): the same in every figure
    of a report. The dict's order is the order models are drawn and listed in."""
    plt = _pyplot()
    from matplotlib.colors import to_hex

    palette = [to_hex(c) for c in plt.get_cmap("tab10").colors]
    palette += [c for c in (to_hex(c) for c in plt.get_cmap("tab20").colors) if c not in palette]
    return {model: palette[i % len(palette)] for i, model in enumerate(order_models(models, order))}


def _by_model(colors: dict[str, str]) -> dict[str, int]:
    """Each model's place in the drawing order (the colour map's order)."""
    return {model: i for i, model in enumerate(colors)}


def plot_temperature(groups: Sequence[GroupSummary], temperature: float | None = None) -> float | None:
    """The temperature of the single-temperature figures: `temperature` (UserError when no row has it), else the
    lowest present among rows with a follow-up rate."""
    present = sorted({g.temperature for g in groups if g.followup_rate is not None})
    if temperature is None:
        return present[0] if present else None
    same = [t for t in present if temperature_value(t) == temperature_value(temperature)]
    if not same:
        shown = ", ".join(fmt_temp(t) for t in present) or "none"
        raise UserError(f"--plot-temperature {fmt_temp(temperature)}: no labelled row at that temperature "
                        f"(present: {shown})")
    return same[0]


def _variant(g: GroupSummary) -> str:
    """What sets a model's rows apart within one dataset panel besides temperature."""
    return " · ".join(p for p in (g.mode, g.settings) if p)


def judged(g: GroupSummary) -> bool:
    """A row with at least one label from a judge model (rules alone never label a genuine follow-up)."""
    return g.n > g.rule_labels


def _baseline(groups: Iterable[GroupSummary]) -> list[GroupSummary]:
    """Unperturbed rows with a follow-up rate from a judge (the rows a model is drawn from)."""
    return [g for g in groups if g.perturbation == "none" and g.followup_rate is not None and judged(g)]


def _accuracy_rows(groups: Sequence[GroupSummary], t: float | None) -> list[GroupSummary]:
    return [g for g in _baseline(groups) if g.accuracy is not None and t is not None and g.temperature == t]


def _effect_rows(groups: Sequence[GroupSummary], t: float | None) -> list[GroupSummary]:
    return [g for g in groups if g.perturbation != "none" and g.delta_vs_none is not None and g.temperature == t
            and judged(g)]


def _mix_rows(groups: Sequence[GroupSummary], t: float | None) -> list[GroupSummary]:
    return [g for g in groups if g.perturbation == "none" and g.n and g.temperature == t]


def _variants(rows: Iterable[GroupSummary]) -> dict[str, list[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for g in rows:
        out[g.model].add(_variant(g))
    return {m: sorted(v) for m, v in out.items()}


def _series_label(model: str, variant: str, variants: dict[str, list[str]]) -> str:
    return f"{model} ({variant})" if len(variants.get(model, [])) > 1 else model


def _padded(low: float, high: float, floor: float = 0.0) -> tuple[float, float]:
    """Axis limits around [low, high] (in %) with 8% padding, within [floor, 100] but for an EDGE share of the span
    beyond them, so a marker at 0% (or 100%) is drawn whole and its interval bar does not hide in the spine; a
    little span always."""
    span = max(high - low, 2.0)
    return max(floor - EDGE * span, low - 0.08 * span), min(100.0 + EDGE * span, high + 0.08 * span)


def _panels(plt: Any, count: int, width: float = 4.2, height: float = 3.6, sharey: bool = True) -> tuple[Any, list]:
    """A figure of `count` panels (width x height inches each): side by side up to PANELS_WIDE inches of panels,
    then in further rows; the `count` panels in reading order (the grid's spare cells hidden)."""
    count = max(1, count)
    ncols = max(1, min(count, int(PANELS_WIDE // width)))
    nrows = math.ceil(count / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(width * ncols + 1.8, height * nrows), sharey=sharey,
                             squeeze=False)
    cells = list(grid.flat)
    for ax in cells[count:]:
        ax.set_visible(False)
    return fig, cells[:count]


def first_in_row(ax: Any) -> bool:
    """The panel opens its row of the grid (where a shared y axis is labelled)."""
    return bool(ax.get_subplotspec().is_first_col())


def _finish(fig: Any, legend: dict[str, Any], title: str) -> Any:
    """The figure with its legend (one entry per series, right of the panels) and its title, laid out."""
    if legend:
        fig.legend(list(legend.values()), list(legend), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
                   frameon=False)
    fig.suptitle(wrapped_title(fig, title), fontsize=11)
    fig.tight_layout()
    return fig


def wrapped_title(fig: Any, title: str) -> str:
    """`title` wrapped to the figure's width (TITLE_CHARS_PER_INCH), so a narrow figure's title is not wider than it."""
    return textwrap.fill(title, max(30, int(TITLE_CHARS_PER_INCH * fig.get_size_inches()[0])))


def text_color(colour: str) -> str:
    """`colour`, darkened toward black until it has a TEXT_CONTRAST contrast ratio on white (WCAG relative
    luminance), for text drawn in a model's colour; a colour dark enough already is returned unchanged."""
    from matplotlib.colors import to_hex, to_rgb

    def luminance(rgb: tuple[float, ...]) -> float:
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    red, green, blue = to_rgb(colour)
    for step in range(21):
        keep = 1 - 0.05 * step
        shade = (red * keep, green * keep, blue * keep)
        if 1.05 / (luminance(shade) + 0.05) >= TEXT_CONTRAST:
            return to_hex(shade)
    return "#000000"


def dodge_points(count: int) -> list[float]:
    """Horizontal display offsets (typographic points) for `count` series drawn at the same temperatures: each
    series, line and markers alike, is drawn this far beside its true temperatures, `DODGE_POINTS` apart and over
    `DODGE_SPAN` at most, centred: a few points, never a share of the gap between temperatures, so no marker reads
    as a measurement at another temperature and every line passes through its own markers."""
    if count <= 1:
        return [0.0] * max(count, 0)
    step = min(DODGE_POINTS, DODGE_SPAN / (count - 1))
    return [(i - (count - 1) / 2) * step for i in range(count)]


def _bar(value: float, low: float, high: float) -> tuple[float, float]:
    """Error-bar lengths below and above `value`; an estimate a rounding error outside its interval gets 0, not a
    negative length (matplotlib refuses those)."""
    return max(0.0, value - low), max(0.0, high - value)


def _dodges(points: Sequence[tuple[float, float]]) -> list[float]:
    """Vertical display offsets (points) so that points within 0.5 of each other on both axes stay visible side by
    side: the data keep their values; only their drawing is shifted (0 for a point alone)."""
    out = [0.0] * len(points)
    clusters: list[list[int]] = []
    for i, (x, y) in enumerate(points):
        home = next((c for c in clusters if abs(points[c[0]][0] - x) <= 0.5 and abs(points[c[0]][1] - y) <= 0.5),
                    None)
        if home is None:
            clusters.append([i])
        else:
            home.append(i)
    for cluster in clusters:
        for rank, i in enumerate(cluster):
            out[i] = (rank - (len(cluster) - 1) / 2) * DODGE_POINTS
    return out


def accuracy_interval(g: GroupSummary) -> tuple[float, float] | None:
    """95% Wilson interval of a row's task accuracy over its scored items (the unit: one assistant turn each)."""
    if g.accuracy is None or not g.accuracy_n:
        return None
    return wilson_interval(g.accuracy * g.accuracy_n, g.accuracy_n)
