"""Report figures for a paper (matplotlib, Agg backend), written as PNG, PDF and SVG: `followup_vs_temperature`,
`accuracy_vs_followup`, `perturbation_effects`, `label_mix` (see `TITLES`). One colour per model in every figure,
models in order of size (`report.model_size`, or `--model-order`); shared parts are in `report.plot_parts`. A
figure with nothing to show is not drawn (`skipped_figures` says why; the figure functions need rows to draw).
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from userturn.client.terminal import wrap_name
from userturn.core.errors import UserError
from userturn.core.taxonomy import TAXONOMY
from userturn.report.plot_parts import (
    LINESTYLES,
    MARKERS,
    _accuracy_rows,
    _bar,
    _baseline,
    _by_model,
    _dodges,
    _effect_rows,
    _finish,
    _mix_rows,
    _padded,
    _panels,
    _pyplot,
    _series_label,
    _variant,
    _variants,
    accuracy_interval,
    dodge_points,
    first_in_row,
    judged,
    model_colors,
    plot_temperature,
    text_color,
    wrapped_title,
)
from userturn.report.summary import GroupSummary
from userturn.report.table import fmt_temp

PLOT_NAMES = ("followup_vs_temperature", "accuracy_vs_followup", "perturbation_effects", "label_mix")
TITLES = {  # what each figure shows: the HTML report's captions
    "followup_vs_temperature": "Genuine follow-up rate against sampling temperature, per model (unperturbed)",
    "accuracy_vs_followup": "Task accuracy against genuine follow-up rate, per model, at one temperature",
    "perturbation_effects": "How much each perturbation of the assistant turn moves the follow-up rate",
    "label_mix": "What the generated user turns are: label shares per model",
}
FORMATS = ("png", "pdf", "svg")
PNG_DPI = 200


NO_JUDGE = "no row is labelled by a judge model (the rules alone never label a genuine follow-up)"


def skipped_figures(groups: Sequence[GroupSummary], temperature: float | None = None) -> dict[str, str]:
    """{figure name: why it has nothing to show} for the figures `build_figures` leaves out."""
    t = plot_temperature(groups, temperature)
    judged_rows = any(judged(g) for g in groups)
    out = {}
    if not _baseline(groups):
        out["followup_vs_temperature"] = NO_JUDGE if not judged_rows else "no unperturbed row with a follow-up rate"
    if not _accuracy_rows(groups, t):
        out["accuracy_vs_followup"] = (NO_JUDGE if not judged_rows else
                                       "no unperturbed row with both task accuracy and a follow-up rate "
                                       f"at T={fmt_temp(t or 0.0)} (a dataset without a scorer has no accuracy)")
    if not _effect_rows(groups, t):
        out["perturbation_effects"] = (NO_JUDGE if not judged_rows else
                                       f"no perturbed row paired with an unperturbed one at T={fmt_temp(t or 0.0)}")
    if not _mix_rows(groups, t):
        out["label_mix"] = "no unperturbed row with a labelled turn"
    return out


def followup_vs_temperature(groups: Sequence[GroupSummary], colors: dict[str, str] | None = None) -> Any:
    """One panel per dataset; per model one line over temperature (unperturbed rows), item-clustered 95% CIs."""
    plt = _pyplot()
    from matplotlib import transforms

    rows = _baseline(groups)
    colors = colors or model_colors(g.model for g in groups)
    datasets = sorted({g.dataset for g in rows})
    temps = sorted({g.temperature for g in rows})
    most = max(len({(g.model, _variant(g)) for g in rows if g.dataset == d}) for d in datasets)
    # a wider panel when many intervals stand side by side: 4.2 inches up to 16 of them, then 0.06 inch each
    fig, axes = _panels(plt, len(datasets), width=4.2 + 0.06 * max(0, most * len(temps) - 16))
    variants = _variants(rows)
    place = _by_model(colors)
    legend: dict[str, Any] = {}
    high = max(100 * (g.ci_high or 0.0) for g in rows)
    for ax, dataset in zip(axes, datasets, strict=False):
        series: dict[tuple[str, str], list[GroupSummary]] = defaultdict(list)
        for g in rows:
            if g.dataset == dataset:
                series[(g.model, _variant(g))].append(g)
        ordered = sorted(series.items(), key=lambda kv: (place[kv[0][0]], kv[0][1]))
        shifts = dodge_points(len(ordered))
        for ((model, variant), members), shift in zip(ordered, shifts, strict=True):
            members.sort(key=lambda g: g.temperature)
            index = variants[model].index(variant)
            x = [g.temperature for g in members]
            y = [100 * (g.followup_rate or 0.0) for g in members]
            bars = [_bar(100 * (g.followup_rate or 0.0), 100 * (g.ci_low or 0.0), 100 * (g.ci_high or 0.0))
                    for g in members]
            label = _series_label(model, variant, variants)
            # line, markers and bars at the true temperatures, the whole series drawn a few points aside
            beside = transforms.offset_copy(ax.transData, fig=fig, x=shift, y=0.0, units="points")
            (line,) = ax.plot(x, y, color=colors[model], linewidth=1.2, alpha=0.75, transform=beside,
                              linestyle=LINESTYLES[index % len(LINESTYLES)], zorder=1.5, label=f"_{label} (line)")
            points = ax.errorbar(x, y, yerr=list(zip(*bars, strict=True)), color=colors[model], linestyle="none",
                                 marker=MARKERS[index % len(MARKERS)], markersize=4, capsize=2.5, elinewidth=0.9,
                                 label=label, transform=beside)
            legend.setdefault(label, (line, points))
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("sampling temperature")
        ax.set_xticks(temps)
        ax.set_xticklabels([fmt_temp(t) for t in temps])
        span = (temps[-1] - temps[0]) or 1.0
        ax.set_xlim(temps[0] - 0.1 * span, temps[-1] + 0.1 * span)
        ax.grid(alpha=0.3)
    for ax in axes:
        if first_in_row(ax):
            ax.set_ylabel("genuine follow-up rate (%)")
    axes[0].set_ylim(*_padded(0.0, high))
    return _finish(fig, legend, "Genuine follow-up rate vs temperature (unperturbed; item-clustered 95% CI; each "
                   "model's series drawn a few points beside the others)")


def accuracy_vs_followup(groups: Sequence[GroupSummary], temperature: float | None = None,
                         colors: dict[str, str] | None = None) -> Any:
    """At one temperature: per dataset panel one point per model (unperturbed), follow-up rate (x, item-clustered
    95% CI) against task accuracy (y, 95% Wilson CI over scored items). The legend names the models."""
    plt = _pyplot()
    from matplotlib import transforms

    colors = colors or model_colors(g.model for g in groups)
    t = plot_temperature(groups, temperature)
    rows = _accuracy_rows(groups, t)
    place = _by_model(colors)
    datasets = sorted({g.dataset for g in rows})
    fig, axes = _panels(plt, len(datasets), width=4.0, height=3.8, sharey=False)
    variants = _variants(rows)
    legend: dict[str, Any] = {}
    for ax, dataset in zip(axes, datasets, strict=False):
        xs, ys = [], []
        members = sorted((g for g in rows if g.dataset == dataset), key=lambda g: (place[g.model], _variant(g)))
        dodge = _dodges([(100 * (g.followup_rate or 0.0), 100 * (g.accuracy or 0.0)) for g in members])
        for g, shift in zip(members, dodge, strict=True):
            index = variants[g.model].index(_variant(g))
            x = 100 * (g.followup_rate or 0.0)
            y = 100 * (g.accuracy or 0.0)
            acc = accuracy_interval(g) or (g.accuracy or 0.0, g.accuracy or 0.0)
            xerr = [[e] for e in _bar(x, 100 * (g.ci_low or 0.0), 100 * (g.ci_high or 0.0))]
            yerr = [[e] for e in _bar(y, 100 * acc[0], 100 * acc[1])]
            offset = transforms.offset_copy(ax.transData, fig=fig, x=0.0, y=shift, units="points")
            point = ax.errorbar([x], [y], xerr=xerr, yerr=yerr, color=colors[g.model], marker=MARKERS[index],
                                markersize=6, capsize=3, elinewidth=0.9, linestyle="none", transform=offset,
                                label=_series_label(g.model, _variant(g), variants))
            legend.setdefault(point.get_label(), point)
            xs += [100 * (g.ci_low or 0.0), 100 * (g.ci_high or 0.0)]
            ys += [100 * acc[0], 100 * acc[1]]
        ax.set_xlim(*_padded(min(xs), max(xs)))
        ax.set_ylim(*_padded(min(ys), max(ys)))
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("genuine follow-up rate (%)")
        ax.set_ylabel("task accuracy (%)")
        ax.grid(alpha=0.3)
    return _finish(fig, legend, f"Task accuracy vs genuine follow-up rate at T={fmt_temp(t or 0.0)} (unperturbed; "
                   "95% CIs)")


def perturbation_effects(groups: Sequence[GroupSummary], temperature: float | None = None,
                         colors: dict[str, str] | None = None) -> Any:
    """At one temperature: per dataset panel, each perturbation's paired difference to the unperturbed rate (pp)
    with its paired 95% interval, one marker per model (offset within the perturbation's row)."""
    plt = _pyplot()
    colors = colors or model_colors(g.model for g in groups)
    t = plot_temperature(groups, temperature)
    rows = _effect_rows(groups, t)
    place = _by_model(colors)
    datasets = sorted({g.dataset for g in rows})
    perturbations = sorted({g.perturbation for g in rows})
    slots = sorted({(g.model, _variant(g)) for g in rows}, key=lambda s: (place[s[0]], s[1]))
    per_row = max(0.7, 0.09 * len(slots))  # inches per perturbation: eleven models' intervals stay apart
    fig, axes = _panels(plt, len(datasets), width=4.2, height=max(2.6, per_row * len(perturbations) + 1.6))
    variants = _variants(rows)
    legend: dict[str, Any] = {}
    low = min(100 * (g.delta_ci_low or 0.0) for g in rows)
    high = max(100 * (g.delta_ci_high or 0.0) for g in rows)
    for ax, dataset in zip(axes, datasets, strict=False):
        for g in sorted((g for g in rows if g.dataset == dataset), key=lambda g: (place[g.model], _variant(g))):
            slot = slots.index((g.model, _variant(g)))
            y = perturbations.index(g.perturbation) + (slot - (len(slots) - 1) / 2) * (0.7 / max(1, len(slots)))
            d = 100 * (g.delta_vs_none or 0.0)
            xerr = [[e] for e in _bar(d, 100 * (g.delta_ci_low or 0.0), 100 * (g.delta_ci_high or 0.0))]
            index = variants[g.model].index(_variant(g))
            point = ax.errorbar([d], [y], xerr=xerr, color=colors[g.model], marker=MARKERS[index], markersize=5,
                                capsize=3, elinewidth=0.9, linestyle="none",
                                label=_series_label(g.model, _variant(g), variants))
            legend.setdefault(point.get_label(), point)
        ax.axvline(0.0, color="#444", linewidth=0.8)
        ax.set_yticks(range(len(perturbations)))
        ax.set_yticklabels(perturbations)
        ax.set_ylim(len(perturbations) - 0.5, -0.5)
        ax.set_xlim(*_padded(min(low, 0.0), max(high, 0.0), floor=-100.0))
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("Δ follow-up rate vs none (pp)")
        ax.grid(alpha=0.3, axis="x")
    return _finish(fig, legend, f"Perturbation effects at T={fmt_temp(t or 0.0)} (paired over shared items; 95% CI)")


UNLABELLED = (("unjudged", "#e8e8e8"), ("judge failed", "#4d4d4d"))


MIX_COLUMNS = 3  # label_mix: at most this many dataset panels side by side, then a new row of panels
MIX_BAR_HEIGHT = 0.34  # inches per bar: eleven models take ~4 inches a panel


def label_mix(groups: Sequence[GroupSummary], temperature: float | None = None,
              colors: dict[str, str] | None = None) -> Any:
    """At one temperature: one panel per dataset (a grid of up to MIX_COLUMNS columns), one bar per model and
    configuration (unperturbed, in size order): each label's share, then the unjudged and judge-failed shares (so a
    bar labelled by rules alone shows how little was labelled). Tick labels in the model's colour, with "labelled n
    of N"; one legend for all panels, below them."""
    plt = _pyplot()
    colors = colors or model_colors(g.model for g in groups)
    t = plot_temperature(groups, temperature)
    rows = _mix_rows(groups, t)
    variants = _variants(rows)
    place = _by_model(colors)
    datasets = sorted({g.dataset for g in rows})
    ncols = min(MIX_COLUMNS, len(datasets))
    nrows = math.ceil(len(datasets) / ncols)
    most = max(sum(1 for g in rows if g.dataset == d) for d in datasets)
    fig, grid = plt.subplots(nrows, ncols, figsize=(5.6 * ncols + 0.6, (MIX_BAR_HEIGHT * most + 1.1) * nrows + 0.9),
                             squeeze=False)
    handles: dict[str, Any] = {}
    for ax, dataset in zip(grid.flat, datasets, strict=False):
        bars = sorted((g for g in rows if g.dataset == dataset), key=lambda g: (place[g.model], _variant(g)))
        totals = [g.n + g.unjudged + g.judge_failures for g in bars]
        names = [wrap_name(_series_label(g.model, _variant(g), variants), 28) + f"\nlabelled {g.n} of {total}"
                 for g, total in zip(bars, totals, strict=True)]
        segments: list[tuple[str, str, list[int]]] = [
            (f"{info.short} {info.name}", info.colour, [g.labels[info.name] for g in bars]) for info in TAXONOMY]
        segments += [(name, colour, counts) for (name, colour), counts in
                     zip(UNLABELLED, ([g.unjudged for g in bars], [g.judge_failures for g in bars]), strict=True)
                     if any(counts)]
        left = [0.0] * len(bars)
        for name, colour, counts in segments:
            widths = [100 * c / total for c, total in zip(counts, totals, strict=True)]
            handles[name] = ax.barh(range(len(bars)), widths, left=left, color=colour, height=0.7, label=name,
                                    edgecolor="white", linewidth=0.5)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.set_yticks(range(len(bars)))
        ax.set_yticklabels(names, fontsize=7)
        for tick, g in zip(ax.get_yticklabels(), bars, strict=True):
            tick.set_color(text_color(colors[g.model]))  # the model's colour (as in the other figures), legible
        ax.set_ylim(len(bars) - 0.5, -0.5)
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of generated turns (%)", fontsize=8)
        ax.set_title(dataset, fontsize=10)
    for ax in list(grid.flat)[len(datasets):]:
        ax.set_visible(False)
    title = f"Label composition per model at T={fmt_temp(t or 0.0)} (unperturbed)"
    fig.suptitle(wrapped_title(fig, title), fontsize=11)
    ncol = min(5, len(handles))
    legend_inches = 0.2 * math.ceil(len(handles) / max(1, ncol)) + 0.15  # its rows, below the panels' x labels
    fig.tight_layout(rect=(0, legend_inches / fig.get_size_inches()[1], 1, 1))
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="upper center", ncol=ncol, frameon=False,
               bbox_to_anchor=(0.5, legend_inches / fig.get_size_inches()[1]))  # just below the panels' x labels
    return fig


def build_figures(groups: Sequence[GroupSummary], temperature: float | None = None,
                  order: Sequence[str] = ()) -> dict[str, Any]:
    """{name: matplotlib Figure} for every report figure with something to show (`skipped_figures` names the
    others), with one shared model colour map in size order (`order`: these models first)."""
    colors = model_colors((g.model for g in groups), order)
    t = plot_temperature(groups, temperature)
    makers: dict[str, Callable[[], Any]] = {
        "followup_vs_temperature": lambda: followup_vs_temperature(groups, colors),
        "accuracy_vs_followup": lambda: accuracy_vs_followup(groups, t, colors),
        "perturbation_effects": lambda: perturbation_effects(groups, t, colors),
        "label_mix": lambda: label_mix(groups, t, colors),
    }
    skipped = skipped_figures(groups, t)
    return {name: makers[name]() for name in PLOT_NAMES if name not in skipped}


def figure_bytes(fig: Any, fmt: str) -> bytes:
    """One figure in one format (PNG at PNG_DPI; PDF and SVG vector, text kept as text in SVG)."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}):
        fig.savefig(buffer, format=fmt, dpi=PNG_DPI if fmt == "png" else "figure", bbox_inches="tight",
                    metadata={"Date": None} if fmt == "svg" else None)
    return buffer.getvalue()


def render_figures(groups: Sequence[GroupSummary], temperature: float | None = None,
                   formats: Sequence[str] = FORMATS, order: Sequence[str] = ()) -> dict[str, dict[str, bytes]]:
    """{figure name: {format: bytes}} for every report figure with something to show; the figures are closed
    afterwards."""
    plt = _pyplot()
    out: dict[str, dict[str, bytes]] = {}
    for name, fig in build_figures(groups, temperature, order).items():
        try:
            out[name] = {fmt: figure_bytes(fig, fmt) for fmt in formats}
        finally:
            plt.close(fig)
    return out


def write_plots(figures: dict[str, dict[str, bytes]], directory: str | Path) -> list[Path]:
    """Write each figure as DIR/<name>.<format> for every format rendered; returns the paths."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create plot directory {directory}: {exc.strerror}") from None
    paths = []
    for name, rendered in figures.items():
        for fmt, data in rendered.items():
            path = directory / f"{name}.{fmt}"
            try:
                path.write_bytes(data)
            except OSError as exc:
                raise UserError(f"cannot write {path}: {exc.strerror}") from None
            paths.append(path)
    return paths
