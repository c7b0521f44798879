"""The terminal report: a rich table of groups, the label legend, judge agreement."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from userturn.judges.agreement import PanelAgreement
from userturn.judges.report import GroupSummary

from userturn.taxonomy import SHORT


def fmt_rate(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def fmt_temp(value: float) -> str:
    """Short form when it is exact (0.7), else every digit (0.7000001): two rows never look alike."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def fmt_ci(group: GroupSummary) -> str:
    if group.ci_low is None or group.ci_high is None:
        return "—"
    return f"{100 * group.ci_low:.1f}–{100 * group.ci_high:.1f}"


def fmt_delta(group: GroupSummary) -> str:
    """Δ vs none in percentage points with its paired interval; '—' for none rows, 'n/a' with no pairing."""
    if group.perturbation == "none":
        return "—"
    if group.delta_vs_none is None or group.delta_ci_low is None or group.delta_ci_high is None:
        return "n/a"
    return (f"{100 * group.delta_vs_none:+.1f} ({100 * group.delta_ci_low:+.1f}…{100 * group.delta_ci_high:+.1f};"
            f" {group.delta_items} items)")


def label_mix(labels: dict[str, int]) -> str:
    return " ".join(f"{SHORT[k]} {v}" for k, v in labels.items() if v) or "—"


def self_judged_flag(group: GroupSummary) -> str:
    if not group.self_judged:
        return ""
    return "SELF" if group.self_judged == group.n else f"SELF {group.self_judged}/{group.n}"


def groups_table(groups: list[GroupSummary], title: str) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    any_settings = any(g.settings for g in groups)
    columns = [("model", "left"), ("dataset", "left"), ("mode", "left"), ("perturb", "left"), ("temp", "right")]
    columns += [("settings", "left")] if any_settings else []
    columns += [("n", "right"), ("items", "right"), ("follow-ups", "right"), ("rate", "right"), ("95% CI", "right"),
                ("Δ vs none pp (95% CI)", "right"), ("judge fail", "right"), ("gen err", "right"),
                ("unjudged", "right"), ("accuracy", "right"), ("labels", "left"), ("judged by", "left")]
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for g in groups:
        accuracy = "—" if g.accuracy is None else f"{100 * g.accuracy:.1f}% (n={g.accuracy_n})"
        judged_by = ", ".join(g.judges) or ("rules" if g.rule_labels else "—")
        flag = self_judged_flag(g)
        cells = [g.model, g.dataset, g.mode, g.perturbation, fmt_temp(g.temperature)]
        cells += [g.settings] if any_settings else []
        cells += [str(g.n), str(g.items), str(g.followups), fmt_rate(g.followup_rate), fmt_ci(g), fmt_delta(g),
                  str(g.judge_failures), str(g.generation_errors), str(g.unjudged), accuracy, label_mix(g.labels),
                  f"{judged_by} [bold red]{flag}[/]" if flag else judged_by]
        table.add_row(*cells)
    return table


def agreement_table(agreement: PanelAgreement) -> Table:
    kind = "Cohen's κ" if agreement.kappa_kind == "cohen" else "Fleiss' κ"
    table = Table(title=f"Judge agreement ({kind} over the {agreement.items} records all of them labelled)",
                  title_justify="left", header_style="bold")
    for name in ("judges", "items", "agreement", "κ"):
        table.add_column(name, justify="left" if name == "judges" else "right")
    kappa = "—" if agreement.kappa is None else f"{agreement.kappa:.3f}"
    table.add_row(", ".join(agreement.judges), str(agreement.items), fmt_rate(agreement.percent_agreement),
                  f"{kappa} ({agreement.kappa_kind})")
    if len(agreement.pairs) > 1:
        for pair in agreement.pairs:
            pk = "—" if pair.cohen_kappa is None else f"{pair.cohen_kappa:.3f}"
            table.add_row(" vs ".join(pair.judges), str(pair.items), fmt_rate(pair.percent_agreement),
                          f"{pk} (cohen)")
    return table


def print_report(console: Console, groups: list[GroupSummary], agreements: list[PanelAgreement],
                 source: str) -> None:
    """Render the whole terminal report."""
    console.print(groups_table(groups, f"userturn report: {source}"))
    console.print("labels: " + ", ".join(f"{v}={k}" for k, v in SHORT.items()))
    console.print("rate = genuine_followup / n (labelled); items = distinct items behind n; 95% CI = Wilson score "
                  "interval at the item-clustered effective sample size; Δ vs none = rate minus the none row's over "
                  "the items labelled under both, percentage points, paired item-level 95% CI (Newcombe method 10); "
                  "judge failures, generation errors and unjudged records are outside n.")
    for g in groups:
        if g.perturbation != "none" and g.delta_vs_none is None and g.delta_note:
            console.print(f"Δ n/a for {g.series} · t={fmt_temp(g.temperature)}: {g.delta_note}")
    if any(g.self_judged for g in groups):
        console.print("[bold red]SELF[/]: labelled by the same model that was probed (self-judged); "
                      "use an independent judge for reported numbers.")
    for agreement in agreements:
        console.print(agreement_table(agreement))
