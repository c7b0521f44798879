"""`userturn judge RESULTS...`: label the generated user turns of results files with a judge panel, each file into
its own judged copy (`judges.run_judge`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from userturn.cli.judge_arguments import add_judge_arguments, panel_config
from userturn.cli.network import add_network_arguments, configure_network
from userturn.cli.paths import Paths, output_dir, output_file
from userturn.cli.results_args import add_results_argument, judge_out_is_folder

NAME = "judge"
EXAMPLES = """\
  userturn judge runs/q9b.jsonl --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B
  # a panel of two judges (majority label, agreement in the report), own output file
  userturn judge runs/q9b.jsonl --out runs/q9b.panel.jsonl --judge-base-url http://127.0.0.1:30001/v1 \\
      --judge-model Qwen/Qwen3.5-27B --judge-base-url http://127.0.0.1:30002/v1 --judge-model openai/gpt-oss-120b"""


def check_out(args: argparse.Namespace) -> None:
    """--out: a file for one results file, a folder for several or a folder."""
    if args.out is not None:
        (output_dir if judge_out_is_folder(args.results) else output_file)(args.out, "--out")


PATHS = Paths(results="skip_judged", check=check_out)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    judge = sub.add_parser(
        "judge", help="label the generated user turns of results files (resumable)",
        description="Label every generated user turn of RESULTS with one or more judge models (rule "
                    "pre-labels first) and write the records to --out (each file of several, or of a folder, to "
                    "its own X.judged.jsonl beside it, or in the folder --out). Rerunning resumes: keys whose output "
                    "record already has an ok verdict from every judge are skipped, failed judgements are asked "
                    "again. Exit 1 when a generated record is left without a label because a judge failed.")
    add_results_argument(judge, "skip_judged")
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
    return judge



def run(args: argparse.Namespace) -> int:
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

    async def judge_all() -> int:
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

    return aio.run(judge_all())
