"""What the report says about the judge's calibration: in the terminal, one table of every panel against the gold
labels (the 2 x 2 counts with `--wide`), the lines on gold keys left out, and the one line saying the judge is
uncalibrated when no gold was given; the same as the HTML report's section."""

from __future__ import annotations

from collections.abc import Sequence

import jinja2
from markupsafe import Markup
from rich import box
from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from userturn.report.calibration import Calibration, Calibrations
from userturn.report.correction import MIN_YOUDEN
from userturn.report.summary import GroupSummary
from userturn.report.table import fmt_kappa, fmt_rate, fmt_temp, interval_cell

UNCALIBRATED = ("judge uncalibrated: no gold labels, so the rates carry the judge's unmeasured error; label a "
                "sample (userturn label RESULTS --n 200 --out gold.jsonl) and report with --gold gold.jsonl for "
                "rates corrected by the judge's sensitivity and specificity")


def _share(value: float | None, interval: list[float] | None) -> str:
    return fmt_rate(value) + (f" {interval_cell(interval[0], interval[1])}" if interval else "")


def calibration_table(calibrations: Sequence[Calibration]) -> Table:
    """One row per judge panel: gold n, base rate, the judge's kappa beside the labellers', Se and Sp with their
    Wilson intervals."""
    table = Table(title="Judge calibration against the gold labels (genuine_followup vs the rest)",
                  title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("judge panel", "gold n", "base rate", "κ judge", "κ labellers", "sensitivity", "specificity"):
        table.add_column(name, justify="left" if name == "judge panel" else "right", overflow="fold",
                         no_wrap=name != "judge panel")
    for c in calibrations:
        labellers = f"{fmt_kappa(c.labeller_kappa)} ({c.labeller_items})" if len(c.labellers) > 1 else "—"
        table.add_row(", ".join(c.panel) or "rules only", str(c.n_gold), fmt_rate(c.base_rate), fmt_kappa(c.kappa),
                      labellers, _share(c.sensitivity, c.sensitivity_ci), _share(c.specificity, c.specificity_ci))
    return table


def confusion_line(c: Calibration) -> str:
    """The 2 x 2 table of one panel in one line (`--wide`)."""
    return (f"{', '.join(c.panel) or 'rules only'}: gold genuine -> judge genuine {c.true_positives} (TP), not "
            f"{c.false_negatives} (FN); gold not genuine -> judge genuine {c.false_positives} (FP), not "
            f"{c.true_negatives} (TN)")


def calibration_lines(groups: Sequence[GroupSummary], calibrations: Calibrations, *, wide: bool = False) -> list[str]:
    """The lines under the calibration table: the 2 x 2 counts (`wide`), how the gold labels were combined, what
    was left out, rows not corrected and why."""
    labellers = calibrations.labellers
    lines = [confusion_line(c) for c in shown_panels(groups, calibrations)] if wide else []
    lines += [f"gold: {calibrations.gold_keys} keys labelled by {', '.join(labellers) or 'nobody'}"
             + (" (one label per key: the labellers' majority on genuine vs not; ties left out: "
                f"{calibrations.disputed})" if len(labellers) > 1 else "")
             + f"; {calibrations.unmatched} match no record, {calibrations.unlabelled} only records without a label"]
    lines.append(f"corrected = (rate + Sp - 1) / (Se + Sp - 1) clipped to [0, 1] (Rogan-Gladen), 95% CI from "
                 f"sampling and calibration error together; not corrected where Se + Sp - 1 < {MIN_YOUDEN}")
    left: dict[str, list[str]] = {}
    for g in groups:
        if g.followup_rate is not None and g.corrected_note:
            left.setdefault(g.corrected_note, []).append(f"{g.series} · T={fmt_temp(g.temperature)}")
    for note, rows in left.items():
        named = "; ".join(rows[:2]) + (f" and {len(rows) - 2} more" if len(rows) > 2 else "")
        lines.append(f"corrected n/a for {len(rows)} row{'s' if len(rows) != 1 else ''} ({named}): {note}")
    return lines


HTML = """<h2 id="calibration">Judge calibration</h2>
{% if not given %}<p class="warn">{{ uncalibrated }}.</p>{% else %}{% if calibrations %}
<div class="scroll"><table><tr><th>judge panel</th><th>gold n</th><th>base rate</th><th>kappa judge</th>
<th>kappa labellers</th><th>sensitivity (95% CI)</th><th>specificity (95% CI)</th><th>TP</th><th>FN</th><th>FP</th>
<th>TN</th></tr>
{% for c in calibrations %}<tr><td>{{ c.panel|join(", ") or "rules only" }}</td><td class="num">{{ c.n_gold }}</td>
<td class="num">{{ rate(c.base_rate) }}</td><td class="num">{{ kappa(c.kappa) }}</td>
<td class="num">{{ kappa(c.labeller_kappa) if c.labellers|length > 1 else "—" }}</td>
<td class="num">{{ share(c.sensitivity, c.sensitivity_ci) }}</td>
<td class="num">{{ share(c.specificity, c.specificity_ci) }}</td><td class="num">{{ c.true_positives }}</td>
<td class="num">{{ c.false_negatives }}</td><td class="num">{{ c.false_positives }}</td>
<td class="num">{{ c.true_negatives }}</td></tr>{% endfor %}</table></div>
<p class="note">TP/FN: gold genuine follow-ups the judge labelled genuine / not; FP/TN: the others it labelled
genuine / not.</p>{% endif %}{% for line in lines %}<p class="note">{{ line }}</p>{% endfor %}{% endif %}
"""


def calibration_html(groups: Sequence[GroupSummary], calibrations: Calibrations | None) -> Markup:
    """The HTML report's calibration section (the uncalibrated warning without gold, where a judge model labelled
    something), autoescaped; empty when there is nothing to say."""
    if calibrations is None and not any(g.n > g.rule_labels for g in groups):
        return Markup("")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return Markup(env.from_string(HTML).render(
        given=calibrations is not None, uncalibrated=UNCALIBRATED,
        calibrations=shown_panels(groups, calibrations) if calibrations else [],
        lines=calibration_lines(groups, calibrations) if calibrations else [], rate=fmt_rate, kappa=fmt_kappa,
        share=_share))


def calibration_text(groups: Sequence[GroupSummary], calibrations: Calibrations | None, *,
                     wide: bool = False) -> list[RenderableType]:
    """What the terminal report prints about calibration: the table and its lines, or, without gold, the one line
    saying the judge is uncalibrated (only where a judge model labelled something: rules need no calibration)."""
    if calibrations is None:
        return [escape(UNCALIBRATED)] if any(g.n > g.rule_labels for g in groups) else []
    shown = shown_panels(groups, calibrations)
    table: list[RenderableType] = [calibration_table(shown)] if shown else []
    return table + [escape(line) for line in calibration_lines(groups, calibrations, wide=wide)]


def shown_panels(groups: Sequence[GroupSummary], calibrations: Calibrations) -> list[Calibration]:
    """The calibrations of the panels the rows shown were labelled by (the rules alone only where a row is)."""
    panels = {tuple(g.judge_panel) for g in groups}
    return [c for panel, c in calibrations.panels.items() if panel in panels]
