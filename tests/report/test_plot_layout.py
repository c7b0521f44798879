"""How the report figures are drawn at 1 and at 11 models (inspected on the matplotlib artists): each series, line
and markers, at the true temperatures and a few points beside the others, points at 0% drawn whole, titles no wider
than their figure, panels in rows rather than one strip, and model names legible in their colour."""

from __future__ import annotations

import itertools

import pytest
from matplotlib.colors import to_hex, to_rgb
from report_grid import PAPER_MODELS, grid_records

from userturn.report import plots
from userturn.report.summary import summarise

TEMPS = (0.0, 0.6, 1.0, 1.2)
FIVE = ("coval", "gsm8k", "healthbench", "ifeval", "mt-bench")


@pytest.fixture(autouse=True)
def _close():
    yield
    plots._pyplot().close("all")


def trend_lines(ax) -> list:
    """The axes' drawn lines (the errorbar containers' data lines are markers only, with no line)."""
    return [line for line in ax.get_lines() if line.get_linestyle() not in ("None", "")]


def drawn(artist) -> list[float]:
    """Where an artist's data points land on the figure: x, y, x, y, ... in display pixels, its own transform
    applied."""
    return [float(v) for point in artist.get_transform().transform(artist.get_xydata()) for v in point]


def test_each_series_line_passes_through_its_own_markers():
    """11 models at the same temperatures: each model's series stands a few points beside the others, and its
    line runs through its own markers (drawn where they are drawn), at the true temperatures."""
    groups = summarise(grid_records(models=PAPER_MODELS[:11], temperatures=TEMPS, perturbations=("none",)))
    fig = plots.followup_vs_temperature(groups)
    fig.canvas.draw()
    ax = fig.get_axes()[0]
    lines, markers = trend_lines(ax), ax.containers
    assert len(lines) == len(markers) == 11
    for line, points in zip(lines, markers, strict=True):
        assert list(line.get_xdata()) == list(points.lines[0].get_xdata()) == list(TEMPS)  # the data: true T
        assert list(points.lines[0].get_ydata()) == list(line.get_ydata())
        assert drawn(line) == pytest.approx(drawn(points.lines[0]))  # the line passes through its markers
        assert to_hex(line.get_color()) == to_hex(points.lines[0].get_color())
    true_x = ax.transData.transform([(TEMPS[0], 0.0)])[0][0]
    shifts = [drawn(points.lines[0])[0] - true_x for points in markers]  # display pixels
    assert len({round(s, 6) for s in shifts}) == 11 and min(shifts) < 0 < max(shifts)  # side by side...
    gap = ax.transData.transform([(TEMPS[1], 0.0)])[0][0] - true_x
    assert max(shifts) - min(shifts) < 0.25 * gap  # ...a few points, never read as another temperature
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == list(plots.model_colors(PAPER_MODELS[:11]))  # one each


def test_one_model_is_drawn_at_the_true_temperatures_with_a_title_that_fits_and_a_point_at_zero_whole():
    groups = summarise(grid_records(models=PAPER_MODELS[:1], temperatures=TEMPS, perturbations=("none",)))
    fig = plots.followup_vs_temperature(groups)
    ax = fig.get_axes()[0]
    (points,) = ax.containers
    assert list(points.lines[0].get_xdata()) == list(TEMPS)
    assert points.lines[0].get_ydata()[0] == 0.0 and ax.get_ylim()[0] < 0  # the point at 0% is not cut in half
    fig.canvas.draw()
    title = fig._suptitle.get_window_extent()
    assert "\n" in fig._suptitle.get_text() and title.width <= fig.bbox.width  # wrapped to the figure's width


def test_five_datasets_and_eleven_models_are_panels_in_rows_not_one_strip():
    groups = summarise(grid_records(models=PAPER_MODELS[:11], datasets=FIVE, temperatures=TEMPS, items=4,
                                    samples=1))
    figures = plots.build_figures(groups)
    for name in ("followup_vs_temperature", "accuracy_vs_followup", "perturbation_effects", "label_mix"):
        fig = figures[name]
        width, _ = fig.get_size_inches()
        visible = [ax for ax in fig.get_axes() if ax.get_visible()]
        assert [ax.get_title() for ax in visible] == list(FIVE), name
        assert width <= 18, (name, width)  # readable when scaled to a page or a 1400-px window
        rows = {round(ax.get_position().y0, 3) for ax in visible}
        assert len(rows) >= 2, name
    # the y axis is named once per row of panels
    ylabels = [ax.get_ylabel() for ax in figures["followup_vs_temperature"].get_axes() if ax.get_visible()]
    assert ylabels.count("genuine follow-up rate (%)") == len({round(ax.get_position().y0, 3) for ax in
                                                              figures["followup_vs_temperature"].get_axes()
                                                              if ax.get_visible()})
    # eleven models' effects: neighbouring markers at least a marker apart (in points)
    ax = figures["perturbation_effects"].get_axes()[0]
    first = [c.lines[0].get_ydata()[0] for c in ax.containers if abs(c.lines[0].get_ydata()[0]) < 0.5]  # row one
    ys = sorted(ax.transData.transform((0, y))[1] for y in first)
    assert len(ys) == 11
    assert min(b - a for a, b in itertools.pairwise(ys)) * 72 / figures["perturbation_effects"].dpi >= 5


def test_model_names_in_a_light_colour_are_darkened_until_legible():
    def contrast(colour: str) -> float:
        lum = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
        return 1.05 / (0.2126 * lum[0] + 0.7152 * lum[1] + 0.0722 * lum[2] + 0.05)

    assert plots.text_color("#1f77b4") == "#1f77b4"  # dark enough: unchanged
    for light in ("#aec7e8", "#bcbd22", "#ffbb78", "#17becf"):
        assert contrast(light) < 3 <= contrast(plots.text_color(light))
    colors = plots.model_colors(PAPER_MODELS[:11])
    groups = summarise(grid_records(models=PAPER_MODELS[:11], temperatures=(0.0,), perturbations=("none",)))
    ax = plots.label_mix(groups, colors=colors).get_axes()[0]
    assert all(contrast(to_hex(t.get_color())) >= 3 for t in ax.get_yticklabels())
