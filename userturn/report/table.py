"""The terminal report: a rich table of groups, the label legend, judge agreement."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from userturn.client.terminal import NAME_WIDTH, print_trimmed, wrap_name
from userturn.core.taxonomy import SHORT
from userturn.judges.agreement import PanelAgreement
from userturn.report.summary import GroupSummary


def fmt_rate(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def fmt_temp(value: float) -> str:
    """6 significant digits, the digits two temperatures differ in (`records.temperature_value`): two rows never
    look alike."""
    return f"{value:g}"


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


def fmt_kappa(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def label_mix(labels: dict[str, int]) -> str:
    return " ".join(f"{SHORT[k]} {v}" for k, v in labels.items() if v) or "—"


def self_judged_flag(group: GroupSummary) -> str:
    if not group.self_judged:
        return ""
    return "SELF" if group.self_judged == group.n else f"SELF {group.self_judged}/{group.n}"


def fmt_tokens(count: int) -> str:
    """12 / 3.4k / 5.6M: a token count in at most 6 characters."""
    if count < 10_000:
        return str(count)
    if count < 10_000_000:
        return f"{count / 1000:.1f}k" if count < 100_000 else f"{count // 1000}k"
    return f"{count / 1_000_000:.1f}M"


def interval_cell(low: float | None, high: float | None, signed: bool = False) -> str:
    """`[low, high]` in percent, one decimal ('' when either is missing)."""
    sign = "+" if signed else ""
    return "" if low is None or high is None else f"[{100 * low:{sign}.1f}, {100 * high:{sign}.1f}]"


def delta_cell(group: GroupSummary) -> str:
    """Compact Δ: value on the first line, paired interval below ('—' for none rows, 'n/a' with no pairing)."""
    if group.perturbation == "none":
        return "—"
    if group.delta_vs_none is None:
        return "n/a"
    return f"{100 * group.delta_vs_none:+.1f}\n{interval_cell(group.delta_ci_low, group.delta_ci_high, signed=True)}"


def corrected_cell(group: GroupSummary, sep: str = "\n") -> str:
    """The Rogan-Gladen rate over its interval; 'n/a' where the panel's calibration cannot correct, '—' without
    gold for the panel or without a rate."""
    if group.followup_corrected is None:
        return "n/a" if group.calibration is not None and group.followup_rate is not None else "—"
    return (f"{fmt_rate(group.followup_corrected)}{sep}"
            f"{interval_cell(group.corrected_ci_low, group.corrected_ci_high)}")


def _row_name(group: GroupSummary, show_mode: bool, width: int = NAME_WIDTH) -> str:
    """model / dataset (mode) / settings / SELF flag: one cell, one fact per line, names wrapped at separators."""
    dataset = wrap_name(group.dataset + (f" ({group.mode})" if show_mode else ""), width)
    lines = [escape(wrap_name(group.model, width)), f"[dim]{escape(dataset)}[/]"]
    if group.settings:
        lines.append(f"[dim]{escape(group.settings)}[/]")
    flag = self_judged_flag(group)
    if flag:
        lines.append(f"[bold red]{flag}[/]")
    return "\n".join(lines)


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)


def groups_table(groups: list[GroupSummary], title: str, *, wide: bool = False, width: int | None = None) -> Table:
    """The results table. Default: a compact set of columns that fits `width` (100 when not given), long names
    wrapped at their separators (never cut); `wide`: every column."""
    if wide:
        return _wide_table(groups, title)
    table = _table(title)
    show_mode = len({g.mode for g in groups}) > 1
    calibrated = any(g.calibration is not None for g in groups)
    headers = ["perturb", "T", "n", "follow-up\n[95% CI]", *(["corrected\n[95% CI]"] if calibrated else []),
               "Δ vs none pp\n[95% CI]", "accuracy", "excluded"]
    rows = []
    for g in groups:
        accuracy = "—" if g.accuracy is None else f"{100 * g.accuracy:.1f}%"
        rate = "—" if g.followup_rate is None else f"{fmt_rate(g.followup_rate)}\n{interval_cell(g.ci_low, g.ci_high)}"
        corrected = [corrected_cell(g)] if calibrated else []
        rows.append([g.perturbation, fmt_temp(g.temperature), str(g.n), rate, *corrected, delta_cell(g), accuracy,
                     f"{g.judge_failures}/{g.generation_errors}/{g.unjudged}"])
    # the other columns keep their natural width (perturb at most 12); the names get what is left, and are wrapped
    # to it at their separators so rich never has to fold them mid-word
    others = [min(12, _longest([headers[0], *(r[0] for r in rows)]))]
    others += [_longest([h, *(r[i] for r in rows)]) for i, h in enumerate(headers) if i]
    left = (width or 100) - sum(others) - 3 * len(others) - 2  # 3: padding, divider, padding; 2: the edges
    name_width = max(10, min(NAME_WIDTH, left))
    cells = [_row_name(g, show_mode, name_width) for g in groups]
    plain = [Text.from_markup(cell).plain for cell in cells]
    table.add_column("model / dataset", overflow="fold", width=min(name_width, _longest(plain or [""])))
    table.add_column("perturb", overflow="fold", max_width=12)
    for name in headers[1:]:  # numbers never wrap: the text columns give way
        table.add_column(name, justify="right", no_wrap=True)
    for cell, row in zip(cells, rows, strict=True):
        table.add_row(cell, *row, end_section=True)
    return table


def _longest(cells: list[str]) -> int:
    return max(len(line) for cell in cells for line in cell.split("\n"))


def _wide_table(groups: list[GroupSummary], title: str) -> Table:
    table = _table(title)
    any_settings = any(g.settings for g in groups)
    text = ["model", "dataset", "mode", "perturb"] + (["settings"] if any_settings else [])
    for name in text:
        table.add_column(name, overflow="fold")
    calibrated = any(g.calibration is not None for g in groups)
    for name in ("temp", "n", "items", "follow-ups", "rate", "95% CI", *(["corrected [95% CI]"] if calibrated else []),
                 "Δ vs none pp (95% CI)", "judge fail", "gen err", "unjudged", "accuracy", "prompt tok", "compl. tok"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("labels", overflow="fold")
    table.add_column("judged by", overflow="fold")
    for g in groups:
        accuracy = "—" if g.accuracy is None else f"{100 * g.accuracy:.1f}% (n={g.accuracy_n})"
        judged_by = ", ".join(g.judges) or ("rules" if g.rule_labels else "—")
        flag = self_judged_flag(g)
        delta = delta_cell(g).replace("\n", " ")
        if g.delta_items is not None and g.delta_vs_none is not None:
            delta += f" {g.delta_items} items"
        cells = [g.model, g.dataset, g.mode, g.perturbation] + ([g.settings] if any_settings else [])
        cells += [fmt_temp(g.temperature), str(g.n), str(g.items), str(g.followups), fmt_rate(g.followup_rate),
                  interval_cell(g.ci_low, g.ci_high) or "—", *([corrected_cell(g, " ")] if calibrated else []),
                  delta, str(g.judge_failures), str(g.generation_errors),
                  str(g.unjudged), accuracy, _tokens(g.prompt_tokens, g), _tokens(g.completion_tokens, g),
                  label_mix(g.labels), f"{judged_by} [bold red]{flag}[/]" if flag else judged_by]
        table.add_row(*cells)
    return table


def _tokens(count: int, group: GroupSummary) -> str:
    return fmt_tokens(count) if group.usage_records else "—"


def totals_line(groups: list[GroupSummary]) -> str:
    """Token usage over the whole file, from the records' usage (the servers' own counts)."""
    with_usage = sum(g.usage_records for g in groups)
    if not with_usage:
        return "tokens: no record carries a usage report"
    prompt, completion = sum(g.prompt_tokens for g in groups), sum(g.completion_tokens for g in groups)
    return (f"tokens: {prompt:,} prompt + {completion:,} completion, {with_usage:,} of "
            f"{sum(g.records for g in groups):,} records reporting usage (per row: --wide, --json)")


SHORT_LEGEND = ("excluded = judge failures / generation errors / unjudged records (all outside n); Δ in "
                "percentage points")


def legend(wide: bool) -> str:
    """What the columns mean, as printed under the table."""
    common = ("n = labelled records; follow-up = genuine_followup / n; 95% CI = Wilson score interval at the "
              "item-clustered effective sample size; Δ vs none = rate minus the none row's over the items labelled "
              "under both, percentage points, paired item-level 95% CI (Newcombe method 10); accuracy = task "
              "accuracy of the probed assistant turns")
    if wide:
        return (common + "; items = distinct items behind n; judge failures, generation errors and unjudged "
                "records are outside n; tokens: the probe requests' usage as the server reported it.")
    return (common + "; excluded = judge failures / generation errors / unjudged records, all outside n. "
            "All columns (items, label mix, judges, tokens per row): --wide.")


def agreement_table(agreement: PanelAgreement) -> Table:
    kind = "Cohen's κ" if agreement.kappa_kind == "cohen" else "Fleiss' κ"
    table = Table(title=f"Judge agreement ({kind} over the {agreement.items} records all of them labelled)",
                  title_justify="left", header_style="bold")
    for name in ("judges", "items", "agreement", "κ"):
        table.add_column(name, justify="left" if name == "judges" else "right")
    table.add_row(", ".join(agreement.judges), str(agreement.items), fmt_rate(agreement.percent_agreement),
                  f"{fmt_kappa(agreement.kappa)} ({agreement.kappa_kind})")
    for pair in agreement.pairs if len(agreement.pairs) > 1 else []:
        table.add_row(" vs ".join(pair.judges), str(pair.items), fmt_rate(pair.percent_agreement),
                      f"{fmt_kappa(pair.cohen_kappa)} (cohen)")
    return table


def judged_by_line(groups: list[GroupSummary]) -> str:
    judges = sorted({j for g in groups for j in g.judges})
    rules = sum(g.rule_labels for g in groups)
    rules_text = f" (+ rules: {rules} record{'s' if rules != 1 else ''})" if rules else ""
    return "judged by: " + (", ".join(judges) or "no judge model") + rules_text


def seed_line(groups: list[GroupSummary]) -> str | None:
    """The line a report carries when sampled rows (T > 0) were generated where the seed was not honoured or its
    handling is not known (`seed_honoured` false, or null for an external endpoint, in their configuration): their
    records cannot be repeated by a rerun. None otherwise, and for files that do not record it."""
    sampled = [g.config for g in groups if g.temperature > 0 and g.config and "seed_honoured" in g.config]
    ignored = sorted({str(c.get("engine")) for c in sampled if c["seed_honoured"] is False})
    unknown = sum(c["seed_honoured"] is None for c in sampled)
    parts = [f"ignored by the engine ({', '.join(ignored)}) for {sum(c['seed_honoured'] is False for c in sampled)} "
             "sampled rows"] if ignored else []
    if unknown:
        parts.append(f"not known to be honoured (external endpoint) for {unknown} sampled rows")
    if not parts:
        return None
    return f"seed: {' and '.join(parts)}: a rerun need not repeat their records (seed_honoured in the configuration)"


def batch_line(groups: list[GroupSummary]) -> str | None:
    """The line a report carries when rows were generated by an engine that computes a request together with others
    (`batch_invariant` false in their configuration: llama-server with several slots or its prompt cache on): a
    rerun need not repeat their records, greedy ones included. None otherwise, and where it is not recorded."""
    varying = [g for g in groups if g.config and g.config.get("batch_invariant") is False]
    if not varying:
        return None
    engines = ", ".join(sorted({str(g.config.get("engine")) for g in varying if g.config}))
    return (f"batch: {len(varying)} of {len(groups)} rows were generated by an engine ({engines}) that computes a "
            "request together with others (several slots, or a reused prompt cache): a rerun need not repeat their "
            "records, greedy ones included (batch_invariant in the configuration)")


def print_report(console: Console, groups: list[GroupSummary], agreements: list[PanelAgreement],
                 source: str, *, wide: bool = False) -> None:
    """Render the whole terminal report (compact columns; `wide`: all of them), no line with trailing spaces."""
    print_trimmed(console, groups_table(groups, f"userturn report: {source}", wide=wide, width=console.width))
    if wide:
        print_trimmed(console, "labels: " + ", ".join(f"{v}={k}" for k, v in SHORT.items()))
    else:
        print_trimmed(console, judged_by_line(groups))
    print_trimmed(console, legend(wide))
    print_trimmed(console, totals_line(groups))
    for g in groups:
        if g.perturbation != "none" and g.delta_vs_none is None and g.delta_note:
            print_trimmed(console, f"Δ n/a for {g.series} · T={fmt_temp(g.temperature)}: {g.delta_note}")
    if seed := seed_line(groups):
        print_trimmed(console, escape(seed))
    if batch := batch_line(groups):
        print_trimmed(console, escape(batch))
    if any(g.self_judged for g in groups):
        print_trimmed(console, "[bold red]SELF[/]: labelled by the same model that was probed (self-judged); "
                      "use an independent judge for reported numbers.")
    for agreement in agreements:
        print_trimmed(console, agreement_table(agreement))
