"""The one line a report gives the human-turn controls (`client/probe/controls.py`): how often the judge calls the
humans' own next turns genuine follow-ups, and how often another item's. Their rows stay rows of their own; this
line sits above the table, one per dataset, mode and judge panel that has them."""

from __future__ import annotations

from collections.abc import Sequence

from userturn.client.probe.controls import HUMAN, SHUFFLED
from userturn.report.summary import GroupSummary
from userturn.report.table import fmt_rate, interval_cell


def _rate(group: GroupSummary | None) -> str:
    if group is None or group.followup_rate is None:
        return "— (no labelled record)"
    return f"{fmt_rate(group.followup_rate)} {interval_cell(group.ci_low, group.ci_high)} (n={group.n})"


def controls_lines(groups: Sequence[GroupSummary]) -> list[str]:
    """`controls (DATASET): the judge calls X% [CI] (n) of humans' own next turns genuine and Y% [CI] (n) of
    shuffled ones`, for each dataset (mode, settings) with a control row; [] without controls."""
    found: dict[tuple[str, str, str], dict[str, GroupSummary]] = {}
    for g in groups:
        if g.model in (HUMAN, SHUFFLED):
            found.setdefault((g.dataset, g.mode, " · ".join(g.judge_panel)), {})[g.model] = g
    lines = []
    show_mode = len({mode for _, mode, _ in found}) > 1
    show_panel = len({panel for _, _, panel in found}) > 1
    for (dataset, mode, panel), rows in found.items():
        where = ", ".join([dataset, *([mode] if show_mode else []), *([panel or "no judge"] if show_panel else [])])
        if not any(g.n > g.rule_labels for g in rows.values()):
            records = " and ".join(f"{g.records} {'human' if g.model == HUMAN else 'shuffled'}"
                                   for g in rows.values())
            lines.append(f"controls ({where}): {records} next turns await a judge model (rules never label a "
                         "genuine follow-up)")
            continue
        lines.append(f"controls ({where}): the judge calls {_rate(rows.get(HUMAN))} of humans' own next turns "
                     f"genuine and {_rate(rows.get(SHUFFLED))} of shuffled ones (another item's human turn)")
    return lines
