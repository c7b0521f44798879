"""Subcommands `userturn judge`, `userturn report` and `userturn judge-eval`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from userturn.cli.argtypes import non_negative_float, positive_int
from userturn.cli.judge_arguments import add_judge_arguments, panel_config
from userturn.cli.probe import add_network_arguments, configure_network
from userturn.cli.results_args import add_results_argument, judge_out_is_folder

if TYPE_CHECKING:
    from rich.console import Console

    from userturn.judges.evaluate import JudgeScore


def model_order_type(text: str) -> list[str]:
    """argparse type of --model-order (comma-separated model names)."""
    from userturn.report.model_size import parse_model_order

    try:
        return parse_model_order(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: argparse._SubParsersAction) -> None:
    """Add `judge`, `report` and `judge-eval` to the `userturn` parser."""
    judge = sub.add_parser(
        "judge", help="label the generated user turns of results files (resumable)",
        description="Label every generated user turn of RESULTS with one or more judge models (rule "
                    "pre-labels first) and write the records to --out (each file of several, or of a folder, to "
                    "its own X.judged.jsonl beside it, or in the folder --out). Rerunning resumes: keys whose output "
                    "record already has an ok verdict from every judge are skipped, failed judgements are asked "
                    "again. Exit 1 when a generated record is left without a label because a judge failed.")
    add_results_argument(judge, "judge")
    judge.add_argument("--out", default=None, metavar="OUT",
                       help="judged records: a file for one results file; a folder for several or a folder, "
                            "holding X.judged.jsonl per input X.jsonl (default: X.judged.jsonl beside each input)")
    judge.add_argument("--force", action="store_true",
                       help="re-ask judges that already have an ok verdict in the input file")
    judge.add_argument("--keep-verdicts", action="store_true",
                       help="keep verdicts of judges outside this panel on the records (they do not vote)")
    judge.add_argument("--no-progress", action="store_true",
                       help="plain progress lines (every 10 s and one at the end) instead of the live view")
    add_judge_arguments(judge, required=True, concurrency_flags=("--judge-concurrency", "--concurrency"))
    add_network_arguments(judge.add_argument_group("network"))
    judge.set_defaults(func=judge_command)

    report = sub.add_parser(
        "report", help="follow-up rate per model x dataset x perturbation x temperature",
        description="Summarise (judged) results files: n, follow-ups, follow-up rate with a Wilson 95% interval, "
                    "label mix, judge failures and task accuracy per model x dataset x mode x perturbation x "
                    "temperature.")
    add_results_argument(report, "report")
    report.add_argument("--json", action="store_true", help="print the groups as a JSON array instead of a table")
    report.add_argument("--format", choices=["table", "csv", "markdown", "latex"], default="table",
                        help="table: the terminal table; csv: every count, rates as fractions, for analysis; "
                             "markdown / latex: the table's columns for a paper (booktabs)")
    report.add_argument("--wide", action="store_true", help="every column (items, label mix, judges, tokens per row); "
                        "the default table fits 100 columns")
    report.add_argument("--html", default=None, metavar="OUT.html", help="also write a self-contained HTML report "
                        "(with the figures when matplotlib is installed)")
    report.add_argument("--plots", default=None, metavar="DIR", help="also write the figures to DIR (PNG, PDF, SVG)")
    report.add_argument("--gold", action="append", default=None, metavar="GOLD.jsonl",
                        help="gold labels (userturn label): calibrate each judge panel on them (gold n, base rate, "
                             "kappa, sensitivity, specificity) and add the rates corrected for its error; repeat "
                             "for several files or labellers")
    report.add_argument("--plot-temperature", type=non_negative_float, default=None, metavar="T",
                        help="temperature of the single-temperature figures (default: the lowest present)")
    rows = report.add_argument_group("rows", "which rows the table, JSON, HTML and figures show (numbers are "
                                             "computed on the whole file first: a perturbed row keeps its Δ)")
    rows.add_argument("--model", action="append", default=None, metavar="PATTERN",
                      help="only models matching this shell pattern (e.g. 'Qwen/*'); repeat for several")
    rows.add_argument("--dataset", action="append", default=None, metavar="PATTERN",
                      help="only datasets matching this shell pattern; repeat for several")
    rows.add_argument("--perturb", action="append", default=None, metavar="NAME",
                      help="only these perturbations (e.g. none, wrong_answer); repeat for several")
    rows.add_argument("--temperature", action="append", type=non_negative_float, default=None, metavar="T",
                      help="only rows at this sampling temperature; repeat for several")
    rows.add_argument("--model-order", type=model_order_type, default=None, metavar="A,B,...",
                      help="these models first, in this order (default: by the parameter count in their names, "
                           "0.8B < 9B < 122B-A10B, then the others by name)")
    report.add_argument("--tokenizer", default=None, metavar="DIR_HUB_ID_OR_GGUF",
                        help="the probe's tokenizer: the HTML sample table shows raw-mode prompts exactly as sent")
    report.add_argument("--chat-template", default=None, metavar="FILE", help="the probe's --chat-template, if any")
    report.set_defaults(func=report_command)

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
    evaluate.set_defaults(func=judge_eval_command)


def judge_command(args: argparse.Namespace) -> int:
    """Judge each input file into its own output, one after another, with one judge panel. Exit 1 when any left a
    record without a label."""
    from userturn.core import aio
    from userturn.core.results_files import results_files
    from userturn.core.results_lock import results_lock
    from userturn.judges.panel import make_panel
    from userturn.judges.run_judge import judge_file, outputs, print_summary

    configure_network(args)
    inputs = results_files(args.results, "skip_judged")
    pairs = outputs(inputs, Path(args.out) if args.out else None, folder=judge_out_is_folder(args.results))
    config = panel_config(args)
    assert config is not None  # --judge-model is required here
    panel = make_panel(config)

    async def run() -> int:
        status = 0
        async with panel:
            for results, out in pairs:
                with results_lock(out):  # one judge per output file: a second one stops here (exit 2)
                    summary = await judge_file(results, out, panel, workers=args.judge_concurrency,
                                               progress=not args.no_progress)
                status = max(status, print_summary(summary, hint=len(pairs) == 1))
        if len(pairs) > 1:
            shown = args.out or " ".join(str(out) for _, out in pairs)
            print(f"next: userturn report {shown} (add --html report.html --plots figures/ for the figures)",
                  file=sys.stderr)
        return status

    return aio.run(run())


def report_command(args: argparse.Namespace) -> int:
    from userturn.cli.report import run_report

    return run_report(args)


def judge_eval_command(args: argparse.Namespace) -> int:
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

    async def run() -> tuple[list, list]:
        async with panel:
            await panel.check()
            return await evaluate(items, panel, workers=args.judge_concurrency, repeats=args.repeat)

    scores, judged = aio.run(run())
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
