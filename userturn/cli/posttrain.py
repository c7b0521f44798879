"""`userturn posttrain POSTTRAIN.yaml`: probe base -> judge -> export -> train -> probe held-out -> compare
(`userturn.orchestrate.posttrain`, imported only when the command runs), and the comparison it prints."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from userturn.cli.paths import Paths

if TYPE_CHECKING:
    from userturn.orchestrate.posttrain import Metric, PostTrainReport

NAME = "posttrain"
EXAMPLES = """\
  userturn posttrain experiments/posttrain.yaml
  userturn posttrain experiments/posttrain.yaml --out-dir /scratch/runs --no-progress
Rerun the same command to resume: finished stages are reused."""
PATHS = Paths()


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    pt = sub.add_parser("posttrain", help="probe base -> judge -> export -> train -> probe held-out -> compare",
                        description="Run a post-training experiment file (see experiments/posttrain.yaml): probe the "
                                    "base model, judge, export training rows from items outside the held-out set, "
                                    "train, probe the trained model on the held-out items, and report base vs "
                                    "trained with the paired difference and its interval. Rerun to resume.")
    pt.add_argument("experiment", metavar="POSTTRAIN.yaml")
    pt.add_argument("--out-dir", default=None, help="parent of the run directory (default: the file's out_dir)")
    pt.add_argument("--no-progress", action="store_true", help="plain progress lines instead of live views")
    return pt


def run(args: argparse.Namespace) -> int:
    from userturn.orchestrate.posttrain import posttrain_main

    show_report(posttrain_main(Path(args.experiment), out_dir=args.out_dir, progress=not args.no_progress))
    return 0



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
