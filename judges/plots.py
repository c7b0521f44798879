"""Report figures (matplotlib, Agg backend): rate vs temperature, accuracy vs rate, label mix."""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path
from typing import Any

from userturn.judges.report import GroupSummary
from userturn.judges.report_table import fmt_temp

from userturn.errors import UserError
from userturn.taxonomy import LABELS, SHORT

PLOT_NAMES = ("followup_vs_temperature", "accuracy_vs_followup", "label_mix")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError("plots need matplotlib: pip install 'userturn[plots]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def followup_vs_temperature(groups: list[GroupSummary]) -> Any:
    """One line per row series (model, dataset, mode, perturbation, settings); item-clustered 95% intervals."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[GroupSummary]] = defaultdict(list)
    for g in groups:
        if g.followup_rate is not None:
            series[g.series].append(g)
    for name, rows in sorted(series.items()):
        rows.sort(key=lambda g: g.temperature)
        x = [g.temperature for g in rows]
        y = [100 * g.followup_rate for g in rows]  # type: ignore[operator]
        err = [[100 * (g.followup_rate - g.ci_low) for g in rows],  # type: ignore[operator]
               [100 * (g.ci_high - g.followup_rate) for g in rows]]  # type: ignore[operator]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=name)
    ax.set_xlabel("sampling temperature")
    ax.set_ylabel("genuine follow-up rate (%)")
    ax.set_ylim(-3, 103)
    ax.set_title("Follow-up rate vs temperature (item-clustered 95% CI)")
    if series:
        ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def accuracy_vs_followup(groups: list[GroupSummary]) -> Any:
    """Task accuracy against follow-up rate, one point per group with both: the decoupling figure."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    points = [g for g in groups if g.accuracy is not None and g.followup_rate is not None]
    models = sorted({g.model for g in points})
    for model in models:
        rows = [g for g in points if g.model == model]
        ax.scatter([100 * g.followup_rate for g in rows], [100 * g.accuracy for g in rows],  # type: ignore[operator]
                   label=model, s=40)
        for g in rows:
            ax.annotate(f"{g.dataset} t={fmt_temp(g.temperature)}", (100 * g.followup_rate, 100 * g.accuracy),  # type: ignore[operator]
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("genuine follow-up rate (%)")
    ax.set_ylabel("task accuracy (%)")
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    ax.set_title("Task accuracy vs interaction awareness")
    if not points:
        ax.text(50, 50, "no groups with task accuracy", ha="center", va="center")
    else:
        ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def label_mix(groups: list[GroupSummary]) -> Any:
    """Stacked horizontal bars: share of each label per group."""
    plt = _pyplot()
    rows = [g for g in groups if g.n]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.35 * len(rows) + 1.5)))
    names = [f"{g.series} · t={fmt_temp(g.temperature)}" for g in rows]
    left = [0.0] * len(rows)
    colors = plt.get_cmap("tab10").colors
    for i, label in enumerate(LABELS):
        widths = [100 * g.labels[label] / g.n for g in rows]
        ax.barh(names, widths, left=left, color=colors[i % len(colors)], label=f"{SHORT[label]} {label}")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of labelled turns (%)")
    ax.set_title("Label mix")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def render_figures(groups: list[GroupSummary]) -> dict[str, bytes]:
    """{plot name: PNG bytes} for every report figure."""
    plt = _pyplot()
    out: dict[str, bytes] = {}
    for name, make in zip(PLOT_NAMES, (followup_vs_temperature, accuracy_vs_followup, label_mix), strict=True):
        fig = make(groups)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        out[name] = buffer.getvalue()
    return out


def write_plots(figures: dict[str, bytes], directory: str | Path) -> list[Path]:
    """Write each figure as DIR/<name>.png; returns the paths."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create plot directory {directory}: {exc.strerror}") from None
    paths = []
    for name, png in figures.items():
        path = directory / f"{name}.png"
        path.write_bytes(png)
        paths.append(path)
    return paths
