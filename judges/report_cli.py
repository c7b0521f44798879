"""`userturn report RESULTS.jsonl [--json] [--html OUT.html] [--plots DIR]`: stream, summarise, render."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from userturn.client.terminal import console
from userturn.judges.report import GroupSummary, summarise_file, to_json_rows
from userturn.judges.report_table import print_report

from userturn.errors import UserError


def run_report(args: argparse.Namespace) -> int:
    """The report command: one streaming pass for the numbers, a second one only for the HTML examples."""
    report = summarise_file(args.results)
    figures: dict[str, dict[str, bytes]] | None = None
    if args.plot_temperature is not None and not (args.plots or args.html):
        raise UserError("--plot-temperature needs --plots DIR or --html OUT.html")
    if args.plots or args.html:
        figures, why = _figures(report.groups, required=bool(args.plots) or args.plot_temperature is not None,
                                temperature=args.plot_temperature,
                                formats=("png", "pdf", "svg") if args.plots else ("svg",))
        if args.plots and figures:
            from userturn.judges.plots import write_plots

            paths = write_plots(figures, args.plots)
            print(f"userturn report: wrote {len(figures)} figures ({len(paths)} files: PNG, PDF, SVG) to {args.plots}",
                  file=sys.stderr)
        if args.html:
            from userturn.judges.html_report import render_html, select_examples, write_html

            examples = select_examples(args.results, report.keep)
            html = render_html(report.groups, report.agreements, examples, report.records, figures, args.results, why,
                               prompt_of=_replayer(args).prompt)
            print(f"userturn report: wrote {write_html(html, args.html)}", file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps(to_json_rows(report.groups), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_report(console(wide=args.wide), report.groups, report.agreements, args.results, wide=args.wide)
    if report.superseded:
        print(f"userturn report: {report.superseded} superseded lines in {args.results} not counted (a later line of "
              "the same key and configuration replaced each, e.g. a re-judged record); `userturn compact` drops them",
              file=sys.stderr)
    return 0


def _figures(groups: list[GroupSummary], required: bool, temperature: float | None = None,
             formats: tuple[str, ...] = ("png", "pdf", "svg")) -> tuple[dict[str, dict[str, bytes]] | None, str]:
    from userturn.judges.plots import render_figures

    try:
        return render_figures(groups, temperature, formats), ""
    except UserError as exc:
        if required:
            raise
        return None, str(exc)


def _replayer(args: argparse.Namespace) -> Any:
    """Rebuilds prompts for the HTML sample table (raw mode: from the file's configuration lines, or --tokenizer)."""
    from userturn.client.prompt_replay import Replayer

    return Replayer(getattr(args, "tokenizer", None), getattr(args, "chat_template", None), results=args.results)
