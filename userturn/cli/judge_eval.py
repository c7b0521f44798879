"""`userturn judge-eval GOLD.jsonl`: score a judge panel against hand-labelled gold items (`judges.evaluate`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from userturn.cli.argtypes import positive_int
from userturn.cli.judge_arguments import add_judge_arguments, panel_config
from userturn.cli.network import add_network_arguments, configure_network
from userturn.cli.paths import Paths

if TYPE_CHECKING:
    from rich.console import Console

    from userturn.judges.evaluate import JudgeScore

NAME = "judge-eval"
EXAMPLES = """\
  userturn judge-eval gold.jsonl --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B
  userturn judge-eval gold.jsonl --with-rules --json --out pred.jsonl \\
      --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B"""
PATHS = Paths(inputs=(("gold", "gold file"),), outputs=(("out", "--out"),))


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    evaluate = sub.add_parser(
        "judge-eval", help="score a judge against a hand-labelled gold file",
        description="Judge every item of GOLD.jsonl and report accuracy, per-label precision/recall and the "
                    "confusion matrix. Gold lines: {id, label, user_turn, messages | query [+ response]}, or the "
                    "answers `userturn label` writes (one item per key: the label most labellers gave).")
    evaluate.add_argument("gold", metavar="GOLD.jsonl")
    evaluate.add_argument("--with-rules", action="store_true",
                          help="apply the rule pre-labels first, as `judge` does (default: judges see every item)")
    evaluate.add_argument("--json", action="store_true", help="print the scores as JSON")
    evaluate.add_argument("--out", default=None, metavar="PRED.jsonl", help="write the judged items (with gold)")
    evaluate.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                          help="judge every item N times and show each judge's agreement with itself (hosted "
                               "judges vary even at temperature 0); the scores are the first pass's")
    add_judge_arguments(evaluate, required=True, concurrency_flags=("--judge-concurrency", "--concurrency"),
                        resumable=False)
    add_network_arguments(evaluate.add_argument_group("network"))
    return evaluate


def run(args: argparse.Namespace) -> int:
    import orjson

    from userturn.client.terminal import console as make_console
    from userturn.core import aio
    from userturn.core.jsonl import JsonlWriter
    from userturn.judges.evaluate import evaluate, exit_status, load_gold
    from userturn.judges.panel import make_panel

    configure_network(args)
    items = load_gold(args.gold)
    config = panel_config(args)
    assert config is not None  # --judge-model is required here
    panel = make_panel(config.model_copy(update={"judge_all": not args.with_rules}))

    async def score_all() -> tuple[list, list]:
        async with panel:
            await panel.check()
            return await evaluate(items, panel, workers=args.judge_concurrency, repeats=args.repeat)

    scores, judged = aio.run(score_all())
    if args.out:
        with JsonlWriter(args.out) as writer:
            for record in judged:
                writer.write(record)
    if args.json:
        sys.stdout.write(orjson.dumps([s.model_dump() for s in scores], option=orjson.OPT_INDENT_2).decode() + "\n")
        return exit_status(scores)
    console = make_console()
    for s in scores:
        _print_score(console, s)
    return exit_status(scores)


def _print_score(console: Console, s: JudgeScore) -> None:
    from rich.table import Table

    from userturn.core.taxonomy import SHORT
    from userturn.judges.evaluate import ERROR

    acc = "—" if s.accuracy is None else f"{100 * s.accuracy:.1f}%"
    kappa = "—" if s.cohen_kappa is None else f"{s.cohen_kappa:.3f}"
    console.print(f"[bold]{s.judge}[/]: accuracy {acc} on {s.scored}/{s.items} items "
                  f"(judge failures {s.failures}), Cohen's κ vs gold {kappa}")
    per = Table(header_style="bold")
    for col in ("label", "precision", "recall", "F1", "gold", "predicted"):
        per.add_column(col, justify="left" if col == "label" else "right")
    for row in s.per_label:
        per.add_row(row.label, *("—" if v is None else f"{v:.3f}" for v in (row.precision, row.recall, row.f1)),
                    str(row.support), str(row.predicted))
    console.print(per)
    if s.self_agreement is not None:
        same = s.self_agreement
        agreement = "—" if same.agreement is None else f"{100 * same.agreement:.1f}%"
        console.print(f"against itself over {same.repeats} repeats: the same label on {agreement} of {same.items} "
                      f"items, κ {'—' if same.kappa is None else f'{same.kappa:.3f}'}")
    confusion = Table(title="confusion (rows: gold, columns: predicted)", title_justify="left", header_style="bold")
    confusion.add_column("gold \\ pred")
    columns = [*SHORT, ERROR]
    for col in columns:
        confusion.add_column(SHORT.get(col, col), justify="right")
    for gold_label, counts in s.confusion.items():
        if sum(counts.values()):
            confusion.add_row(gold_label, *(str(counts[c]) for c in columns))
    console.print(confusion)
