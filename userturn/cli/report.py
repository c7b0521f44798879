"""`userturn report RESULTS... [--json | --format F] [--html OUT.html] [--plots DIR] [filters]`: stream the results
files (several read as one: `userturn.core.results_files`), summarise, select rows, render."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from userturn.cli.argtypes import non_negative_float
from userturn.cli.paths import Paths
from userturn.cli.results_args import add_results_argument
from userturn.core.errors import UserError

if TYPE_CHECKING:  # the parser is built for every command: the report's code loads when `report` runs
    from userturn.report.calibration import Calibrations
    from userturn.report.label_notice import LabelNotice
    from userturn.report.summary import GroupSummary, Report

NAME = "report"
EXAMPLES = """\
  userturn report runs/q9b.judged.jsonl
  userturn report runs/q9b.judged.jsonl --wide
  userturn report runs/q9b.judged.jsonl --html report.html --plots figures/
  userturn report runs/q9b.judged.jsonl --json
  # a paper's table: unperturbed rows at T=0, models by size (or --model-order A,B)
  userturn report runs/q9b.judged.jsonl --format latex --perturb none --temperature 0
  userturn report runs/q9b.judged.jsonl --format csv --model 'Qwen/*'
The default table fits 100 columns (long names wrap); --wide adds items, label mix, judges and tokens per row."""
PATHS = Paths(results="prefer_judged", inputs=(("chat_template", "--chat-template"),), outputs=(("html", "--html"),),
              output_dirs=(("plots", "--plots"),))


def model_order_type(text: str) -> list[str]:
    """argparse type of --model-order (comma-separated model names)."""
    from userturn.report.model_size import parse_model_order

    try:
        return parse_model_order(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    report = sub.add_parser(
        "report", help="follow-up rate per model x dataset x perturbation x temperature",
        description="Summarise (judged) results files: n, follow-ups, follow-up rate with a Wilson 95% interval, "
                    "label mix, judge failures and task accuracy per model x dataset x mode x perturbation x "
                    "temperature.")
    add_results_argument(report, "prefer_judged")
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
    return report



def run(args: argparse.Namespace) -> int:
    """The report command: one streaming pass for the numbers, a second one only for the HTML examples. Exit 1 when
    --plots could not draw (matplotlib missing); everything else asked for is still written."""
    import orjson

    from userturn.core.results_files import configs_of, describe, results_files
    from userturn.report.filters import RowFilter, select_groups
    from userturn.report.label_notice import label_notice
    from userturn.report.summary import summarise_file, to_json_rows

    if args.json and args.format != "table":
        raise UserError(f"--json and --format {args.format}: choose one output format")
    if args.plot_temperature is not None and not (args.plots or args.html):
        raise UserError("--plot-temperature needs --plots DIR or --html OUT.html")
    paths = results_files(args.results)
    source = describe(args.results)
    report = summarise_file(paths)
    if not report.groups:
        raise UserError(f"{source}: no userturn records to report (empty, or only configuration lines)")
    calibrations = None
    if getattr(args, "gold", None):
        from userturn.report.calibration import calibrate
        from userturn.report.correction import apply_calibrations

        calibrations = calibrate(paths, args.gold)
        apply_calibrations(report.groups, calibrations)
    rows = RowFilter(models=args.model or [], datasets=args.dataset or [], perturbations=args.perturb or [],
                     temperatures=args.temperature or [], model_order=args.model_order or [])
    groups = select_groups(report.groups, rows)
    notice = label_notice(groups, args.results)
    status = 0
    figures: dict[str, dict[str, bytes]] | None = None
    skipped: dict[str, str] = {}
    why = ""
    if args.plots or args.html:
        figures, skipped, why = _figures(groups, args.plot_temperature, rows.model_order,
                                         ("png", "pdf", "svg") if args.plots else ("svg",))
        if args.plots:
            status = _write_plots(figures, skipped, why, args.plots)
        if args.html:
            from userturn.client.render.prompt_replay import Replayer
            from userturn.report.html import render_html, select_examples, write_html

            examples = select_examples(paths, report.keep)
            replay = Replayer(args.tokenizer, args.chat_template, configs=configs_of(paths))  # raw-mode prompts
            html = render_html(groups, report.agreements, examples, report.records, figures, source, why,
                               prompt_of=replay.prompt, skipped=skipped, filters=rows.describe(),
                               notice=notice.text if notice else None, quote_reasks=report.quote_reasks,
                               calibrations=calibrations)
            print(f"userturn report: wrote {write_html(html, args.html)}", file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps(to_json_rows(groups), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.format != "table":
        from userturn.report.formats import RENDERERS

        sys.stdout.write(RENDERERS[args.format](groups, notice.caveat if notice else None))
    else:
        _print_table(args, groups, report, notice, source + (f" ({rows.describe()})" if rows.active else ""))
        _print_calibration(groups, calibrations, wide=args.wide)
    if report.superseded:
        across = " (within or across the files)" if len(paths) > 1 else ""
        print(f"userturn report: {report.superseded} superseded lines in {source} not counted (a later line of "
              f"the same key and configuration replaced each{across}, e.g. a re-judged record); `userturn compact` "
              "drops them within a file", file=sys.stderr)
    return status


def _print_table(args: argparse.Namespace, groups: list[GroupSummary], report: Report, notice: LabelNotice | None,
                 title: str) -> None:
    """The terminal report: a notice that puts the rates in doubt above the table, any other below it."""
    from rich.markup import escape

    from userturn.client.terminal import console, print_trimmed
    from userturn.report.controls import controls_lines
    from userturn.report.table import print_report

    if any(g.n for g in groups) and not any(g.n > g.rule_labels for g in groups):
        title += " (judge failed" if any(g.judge_failures for g in groups) else " (rules only"
        title += ": no rate below is a measurement)"
    if notice and notice.above:
        print_trimmed(console(), escape("NOTICE: " + notice.text))
    for line in controls_lines(groups):
        print_trimmed(console(), escape(line))
    print_report(console(wide=args.wide), groups, report.agreements, title, wide=args.wide)
    if notice and not notice.above:
        print_trimmed(console(), escape(notice.text))
    if report.quote_reasks:
        print_trimmed(console(), f"judge re-asks: {report.quote_reasks} replies held only a verdict quoted from the "
                      "generated turn, or two different verdicts, and were asked again (quoted text never votes)")


def _print_calibration(groups: list[GroupSummary], calibrations: Calibrations | None, *, wide: bool) -> None:
    """The judge's calibration table and lines under the report, or the one line saying it is uncalibrated."""
    from userturn.client.terminal import console, print_trimmed
    from userturn.report.calibration_view import calibration_text

    for part in calibration_text(groups, calibrations, wide=wide):
        print_trimmed(console(), part)


def _figures(groups: list[GroupSummary], temperature: float | None, order: list[str],
             formats: tuple[str, ...]) -> tuple[dict[str, dict[str, bytes]], dict[str, str], str]:
    """(figures drawn, {figure left out: why}, why none at all: '' when matplotlib is there)."""
    from userturn.report.plot_parts import matplotlib_missing
    from userturn.report.plots import render_figures, skipped_figures

    missing = matplotlib_missing()
    if missing:
        return {}, {}, missing
    return render_figures(groups, temperature, formats, order), skipped_figures(groups, temperature), ""


def _write_plots(figures: dict[str, dict[str, bytes]], skipped: dict[str, str], why: str, directory: str) -> int:
    if why:
        print(f"userturn report: no figures written to {directory}: {why}", file=sys.stderr)
        return 1
    from userturn.report.plots import write_plots

    paths = write_plots(figures, directory)
    by_reason: dict[str, list[str]] = {}
    for name, reason in skipped.items():
        by_reason.setdefault(reason, []).append(name)
    left_out = "".join(f"; not drawn (nothing to show): {', '.join(names)}: {reason}"
                       for reason, names in by_reason.items())
    print(f"userturn report: wrote {len(figures)} figure{'s' if len(figures) != 1 else ''} ({len(paths)} files: "
          f"PNG, PDF, SVG) to {directory}{left_out}", file=sys.stderr)
    return 0
