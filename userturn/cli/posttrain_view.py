"""How `userturn posttrain` shows its comparison: the base-vs-trained table, its numbered notes, what each metric
means and where the records are (`userturn.orchestrate.posttrain` computes and writes; this prints)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from userturn.orchestrate.posttrain import Metric, PostTrainReport


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _pp(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f}"


def comparison_table(rows: Sequence[Metric], title: str) -> tuple[Any, list[str]]:
    """The base-vs-trained table (fits 100 columns) and its notes, numbered: a row's note column names its note."""
    from rich.table import Table

    table = Table(title=title)
    for column in ("metric", "T", "base", "n", "trained", "n ", "items", "Δ (pp)", "95% CI (pp)", "note"):
        table.add_column(column, justify="left" if column in ("metric", "note") else "right",
                         no_wrap=column != "metric")
    notes: list[str] = []
    for m in rows:
        ci = "—" if m.ci_low is None else f"[{_pp(m.ci_low)}, {_pp(m.ci_high)}]"
        if m.note and m.note not in notes:
            notes.append(m.note)
        table.add_row(m.metric, f"{m.temperature:g}", _pct(m.base_rate), str(m.base_n), _pct(m.trained_rate),
                      str(m.trained_n), str(m.items), _pp(m.delta), ci,
                      f"[{notes.index(m.note) + 1}]" if m.note else "")
    return table, [f"[{n}] {note}" for n, note in enumerate(notes, 1)]


def show_report(report: PostTrainReport) -> None:
    """The table, its notes, the metric definitions, the stage seconds and where the report is, on stdout."""
    from userturn.client.terminal import console as terminal_console
    from userturn.orchestrate.posttrain import METRICS

    console = terminal_console()
    table, notes = comparison_table(report.rows, report.title)
    console.print(table)
    for note in notes:
        console.print(f"  {note}", soft_wrap=True)
    for name, text in METRICS.items():
        console.print(f"  {name}: {text}", soft_wrap=True)
    console.print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in report.stage_seconds.items()),
                  soft_wrap=True)
    console.print(f"(report: {report.run_dir / 'report.json'}; records: {report.run_dir}/*/results.jsonl)")
