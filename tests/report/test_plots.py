"""Report figures: every format written, one series per model, one colour per model across figures, axes that
follow the data (inspected on the matplotlib Figure objects, not on pixels)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord, record_key
from userturn.report import plots
from userturn.report.summary import summarise

MODELS = ("base-model-with-a-rather-long-name", "model-b", "model-c")
DATASETS = ("gsm8k", "mt-bench")
TEMPS = (0.0, 0.7, 1.0)
ITEMS = 12


def records(models=MODELS, datasets=DATASETS, temps=TEMPS, seed: int = 3) -> list[ProbeRecord]:
    """Follow-up rates in 0–25% (model-dependent), some restatements, task correctness per item."""
    rng = random.Random(seed)
    out = []
    for m, model in enumerate(models):
        for dataset in datasets:
            for perturbation in ("none", "wrong_answer"):
                for t in temps:
                    for i in range(ITEMS):
                        for k in range(2):
                            rate = 0.05 + 0.06 * m + 0.05 * t - (0.04 if perturbation != "none" else 0)
                            label = ("genuine_followup" if rng.random() < rate else
                                     rng.choice(["restates_query", "generic", "assistant_continuation"]))
                            out.append(ProbeRecord(
                                key=record_key(model, dataset, f"q{i}", perturbation, t, k), model=model,
                                dataset=dataset, item_id=f"q{i}", perturbation=perturbation, temperature=t,
                                sample=k, seed=k, status="ok", user_turn="x", label=label, label_source="judge",
                                judge_status="ok", correct=(i + m) % 3 != 0 if perturbation == "none" else False))
    return out


@pytest.fixture(scope="module")
def groups():
    return summarise(records())


def line_colors(ax) -> dict[str, str]:
    """{series label: colour} of an axes' errorbar series (the data line and its interval bars)."""
    out = {}
    for c in ax.containers:
        colour = to_hex(c.lines[0].get_color())
        assert all(to_hex(bars.get_color()[0]) == colour for bars in c.lines[2])  # the bars in the series' colour
        out[c.get_label()] = colour
    return out


def test_every_figure_in_every_format(groups, tmp_path: Path):
    rendered = plots.render_figures(groups)
    paths = plots.write_plots(rendered, tmp_path / "figs")
    assert sorted(p.name for p in paths) == sorted(f"{n}.{f}" for n in plots.PLOT_NAMES for f in plots.FORMATS)
    for name in plots.PLOT_NAMES:
        assert (tmp_path / "figs" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert (tmp_path / "figs" / f"{name}.pdf").read_bytes().startswith(b"%PDF")
        assert b"<svg" in (tmp_path / "figs" / f"{name}.svg").read_bytes()
    from PIL import Image

    with Image.open(tmp_path / "figs" / "followup_vs_temperature.png") as image:
        assert image.info["dpi"][0] == pytest.approx(plots.PNG_DPI, abs=1)


def test_followup_vs_temperature_one_series_per_model_per_dataset_panel(groups):
    fig = plots.followup_vs_temperature(groups, plots.model_colors(g.model for g in groups))
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == list(DATASETS)
    for ax in axes:
        containers = ax.containers  # one errorbar container per series
        assert sorted(c.get_label() for c in containers) == sorted(MODELS)
        xs = [list(c.lines[0].get_data()[0]) for c in containers]
        # unperturbed rows only: one point per temperature, at the true temperatures (each model's series is drawn
        # a few points beside the others: `dodge_points`)
        assert all(series == list(TEMPS) for series in xs)
    # the y axis follows the data: rates here stay well below 50%, and the top is just above the highest CI; the
    # bottom a hair below 0, so a point at 0% is drawn whole
    highest = max(100 * g.ci_high for g in groups if g.perturbation == "none")
    low, high = axes[0].get_ylim()
    assert -0.03 * high < low < 0 and highest < high <= highest * 1.2 + 1 and high < 60
    assert axes[0].get_xlim()[0] < -0.05 < 1.05 < axes[0].get_xlim()[1] < 1.3
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["0", "0.7", "1"]  # ticks at the true temperatures


def test_dodge_points_spread_a_few_points_apart():
    assert plots.dodge_points(1) == [0.0]
    assert plots.dodge_points(3) == pytest.approx([-5.0, 0.0, 5.0])  # DODGE_POINTS apart
    eleven = plots.dodge_points(11)
    assert eleven[-1] - eleven[0] == pytest.approx(24.0) and len(set(eleven)) == 11  # DODGE_SPAN at most


def test_model_colours_are_the_same_in_every_figure(groups):
    colors = plots.model_colors(g.model for g in groups)
    assert len(set(colors.values())) == len(MODELS)
    figures = plots.build_figures(groups)
    try:
        for ax in figures["followup_vs_temperature"].get_axes():
            assert line_colors(ax) == colors
        for ax in figures["accuracy_vs_followup"].get_axes():
            assert line_colors(ax) == colors
        for ax in figures["perturbation_effects"].get_axes():
            assert line_colors(ax) == colors
        for ax in figures["label_mix"].get_axes():
            for tick in ax.get_yticklabels():
                model = tick.get_text().split("\nlabelled")[0].replace("\n", "")  # the name, wrapped at a `-`
                assert to_hex(tick.get_color()) == plots.text_color(colors[model])  # legible on white
    finally:
        for fig in figures.values():
            plots._pyplot().close(fig)
    # the colour of a model does not depend on which figure or which subset of rows it appears in
    assert plots.model_colors(reversed(MODELS)) == colors


def test_accuracy_vs_followup_one_point_per_model_at_the_chosen_temperature(groups):
    fig = plots.accuracy_vs_followup(groups)  # default: the lowest temperature present
    assert "T=0" in fig._suptitle.get_text()
    for ax in fig.get_axes():
        assert len(ax.containers) == len(MODELS)
        xs = []
        for c in ax.containers:
            assert c.has_xerr and c.has_yerr  # interval bars on both axes
            x, y = c.lines[0].get_data()
            assert len(x) == 1
            xs.append(x[0])
            row = next(g for g in groups if g.model == c.get_label() and g.dataset == ax.get_title()
                       and g.perturbation == "none" and g.temperature == 0.0)
            assert x[0] == pytest.approx(100 * row.followup_rate) and y[0] == pytest.approx(100 * row.accuracy)
        low, high = ax.get_xlim()
        assert -0.03 * (high - low) <= low < min(xs) and max(xs) < high < 70  # scaled to the data, not 0-100
    # the legend names every model once, outside the axes (no overlapping annotations)
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sorted(legend_texts) == sorted(MODELS)
    at_one = plots.accuracy_vs_followup(groups, temperature=1.0)
    assert "T=1" in at_one._suptitle.get_text()
    row = next(g for g in groups if g.model == "model-b" and g.dataset == "gsm8k" and g.perturbation == "none"
               and g.temperature == 1.0)
    container = next(c for c in at_one.get_axes()[0].containers if c.get_label() == "model-b")
    assert container.lines[0].get_data()[0][0] == pytest.approx(100 * row.followup_rate)


def test_perturbation_effects_are_paired_deltas_with_intervals(groups):
    fig = plots.perturbation_effects(groups, temperature=0.7)
    ax = fig.get_axes()[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["wrong_answer"]
    for c in ax.containers:
        row = next(g for g in groups if g.model == c.get_label() and g.dataset == ax.get_title()
                   and g.perturbation == "wrong_answer" and g.temperature == 0.7)
        assert c.lines[0].get_data()[0][0] == pytest.approx(100 * row.delta_vs_none)
        assert c.has_xerr
    low, high = ax.get_xlim()
    assert low < min(100 * g.delta_ci_low for g in groups if g.delta_ci_low is not None and g.temperature == 0.7)
    assert high >= 0


def test_label_mix_one_bar_per_model_and_dataset_summing_to_100(groups):
    fig = plots.label_mix(groups)
    assert [ax.get_title() for ax in fig.get_axes()] == list(DATASETS)  # one panel per dataset, side by side
    for ax in fig.get_axes():
        assert len(ax.get_yticklabels()) == len(MODELS)
        totals: dict[float, float] = {}
        for patch in ax.patches:
            totals[patch.get_y()] = totals.get(patch.get_y(), 0.0) + patch.get_width()
        assert all(total == pytest.approx(100) for total in totals.values())
        assert all("labelled 24 of 24" in t.get_text() for t in ax.get_yticklabels())


def test_label_mix_at_eleven_models_and_four_datasets_stays_a_readable_grid():
    models = [f"Qwen3.5-{size}" for size in ("397B-A17B", "0.8B", "122B-A10B", "27B", "2B", "4B", "9B", "35B-A3B")]
    models += ["openai/gpt-oss-120b", "openai/gpt-oss-20b", "glm-4.5-air"]
    many = summarise(records(models=models, datasets=("a", "b", "c", "d"), temps=(0.0,)))
    fig = plots.label_mix(many)
    visible = [ax for ax in fig.get_axes() if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ["a", "b", "c", "d"]
    width, height = fig.get_size_inches()
    assert height <= 12 and width <= 18  # a 3 x 2 grid of panels, not one column of 44 bars
    names = [t.get_text().split("\nlabelled")[0].replace("\n", "") for t in visible[0].get_yticklabels()]
    assert names == ["Qwen3.5-0.8B", "Qwen3.5-2B", "Qwen3.5-4B", "Qwen3.5-9B", "openai/gpt-oss-20b",
                     "Qwen3.5-27B", "Qwen3.5-35B-A3B", "openai/gpt-oss-120b", "Qwen3.5-122B-A10B",
                     "Qwen3.5-397B-A17B", "glm-4.5-air"]  # by size, parsed from the names; no size: last


def test_label_mix_shows_unjudged_and_failed_turns_beside_the_labels():
    rs = records(models=MODELS[:1], datasets=DATASETS[:1], temps=(0.0,))
    for i, r in enumerate(rs):
        if i % 4 == 1:
            r.label, r.label_source, r.judge_status = None, None, None  # unjudged
        elif i % 4 == 2:
            r.label, r.label_source, r.judge_status = None, None, "error"  # judge failed
    group = next(g for g in summarise(rs) if g.perturbation == "none")
    ax = plots.label_mix([group]).get_axes()[0]
    legend = [t.get_text() for t in ax.get_figure().legends[0].get_texts()]
    assert legend[-2:] == ["unjudged", "judge failed"]
    widths = {c.get_label(): c.patches[0].get_width() for c in ax.containers}
    total = group.n + group.unjudged + group.judge_failures
    assert widths["unjudged"] == pytest.approx(100 * group.unjudged / total) and group.unjudged == 6
    assert widths["judge failed"] == pytest.approx(100 * group.judge_failures / total)
    assert sum(widths.values()) == pytest.approx(100)
    assert f"labelled {group.n} of {total}" in ax.get_yticklabels()[0].get_text()


def test_unknown_plot_temperature_is_a_user_error(groups, tmp_path, capsys):
    with pytest.raises(UserError, match=r"no labelled row at that temperature \(present: 0, 0\.7, 1"):
        plots.build_figures(groups, temperature=0.3)
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:
        for r in records(models=MODELS[:2], datasets=DATASETS[:1], temps=(0.0, 1.0)):
            writer.write(r)
    assert main(["report", str(results), "--plots", str(tmp_path / "p"), "--plot-temperature", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plot-temperature 0.5" in err
    assert main(["report", str(results), "--plot-temperature", "1"]) == 2
    assert "needs --plots DIR or --html" in capsys.readouterr().err
    assert main(["report", str(results), "--plots", str(tmp_path / "p"), "--plot-temperature", "1"]) == 0
    assert len(list((tmp_path / "p").iterdir())) == 12


def test_figures_with_nothing_to_show_are_not_drawn_and_say_why():
    empty = summarise([ProbeRecord(key=record_key("m", "d", "1", "none", 0.0, 0), model="m", dataset="d",
                                   item_id="1", temperature=0.0, sample=0, seed=0, status="ok", user_turn="x")])
    assert plots.render_figures(empty, formats=("svg",)) == {}
    assert set(plots.skipped_figures(empty)) == set(plots.PLOT_NAMES)
    rules = summarise([ProbeRecord(key=record_key("m", "d", "1", "none", 0.0, 0), model="m", dataset="d",
                                   item_id="1", temperature=0.0, sample=0, seed=0, status="ok", user_turn="x",
                                   label="restates_query", label_source="rule", judge_status="ok",
                                   judges=[{"judge": "rules", "source": "rule", "status": "ok",
                                            "label": "restates_query"}])])
    assert rules[0].followup_rate == 0.0  # a rate of 0% that the rules alone could never make anything else
    skipped = plots.skipped_figures(rules)
    assert set(skipped) == {"followup_vs_temperature", "accuracy_vs_followup", "perturbation_effects"}
    assert skipped["followup_vs_temperature"] == plots.NO_JUDGE
    assert set(plots.render_figures(rules, formats=("svg",))) == {"label_mix"}  # how little was labelled


def test_points_at_the_same_place_are_drawn_apart_but_keep_their_values():
    assert plots._dodges([(10.0, 50.0), (10.2, 50.1), (30.0, 50.0)]) == [-2.5, 2.5, 0.0]
    same = [r for r in records(models=MODELS[:2], datasets=DATASETS[:1], temps=(0.0,), seed=1)]
    for r in same:  # both models: the same labels and the same correctness on every item
        r.label = "genuine_followup" if r.item_id in ("q0", "q1") else "generic"
        r.correct = r.item_id != "q2"
    fig = plots.accuracy_vs_followup(summarise(same))
    ax = fig.get_axes()[0]
    drawn = [c.lines[0] for c in ax.containers]
    assert [tuple(line.get_data()[0]) for line in drawn] == [tuple(drawn[0].get_data()[0])] * 2  # same values
    shown = [line.get_transform().transform((line.get_data()[0][0], line.get_data()[1][0])) for line in drawn]
    assert shown[0][0] == pytest.approx(shown[1][0]) and abs(shown[0][1] - shown[1][1]) > 3  # drawn apart


def test_an_estimate_a_rounding_error_outside_its_interval_draws_no_negative_bar():
    assert plots._bar(100.0, 64.5, 99.99999999999999) == (pytest.approx(35.5), 0.0)
    assert plots._bar(0.0, 1e-15, 30.0) == (0.0, 30.0)


def test_label_mix_draws_every_label_in_its_own_colour():
    """Eight labels, eight distinct colours (each the taxonomy's), none shared with unjudged or judge failed."""
    from userturn.core.taxonomy import COLOURS, LABELS

    rs = records(models=MODELS[:1], datasets=DATASETS[:1], temps=(0.0,))
    for r, label in zip(rs, [*LABELS, None, None] * len(rs), strict=False):
        failed = label is None and r.sample == 1
        r.label, r.label_source, r.judge_status = label, "judge" if label else None, "error" if failed else None
    group = next(g for g in summarise(rs) if g.perturbation == "none")
    assert all(group.labels[label] for label in LABELS) and group.unjudged and group.judge_failures
    ax = plots.label_mix([group]).get_axes()[0]
    drawn = {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in ax.containers}
    by_label = {name.split(" ", 1)[1]: colour for name, colour in drawn.items() if " " in name and
                name.split(" ", 1)[1] in LABELS}
    assert by_label == COLOURS and len(set(by_label.values())) == 8
    assert len(set(drawn.values())) == len(drawn) == 10  # and apart from unjudged / judge failed
