"""`userturn probe`: generate the next user turn for every conversation of a dataset."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from userturn.cli.argtypes import non_negative_float, positive_int
from userturn.cli.judge_arguments import add_judge_arguments, panel_config
from userturn.cli.key_args import add_key_arguments
from userturn.cli.network import add_network_arguments, configure_network
from userturn.cli.option_flags import add_option_flags
from userturn.cli.paths import Paths
from userturn.client.probe.perturbations import names as perturbation_names
from userturn.client.probe.scoring import SCORERS, scorer_help
from userturn.core.errors import UserError

if TYPE_CHECKING:  # the heavy modules (pydantic, asyncio) load when a command runs, not when the parser is built
    from userturn.client.probe.pipeline import ProbeSummary
    from userturn.core.options import Options
    from userturn.core.shards import Shard
    from userturn.orchestrate.run_builder import TargetSource

NAME = "probe"
EXAMPLES = """\
  # a server you run yourself (raw completions, the model's own chat template)
  userturn probe --base-url http://127.0.0.1:30000/v1 --model Qwen/Qwen3.5-9B --tokenizer Qwen/Qwen3.5-9B \\
      --dataset gsm8k:test --limit 100 --temperature 0 --temperature 1 --out runs/q9b.jsonl
  # a shipped manifest: launches the server, probes, shuts it down (`userturn list manifests`)
  userturn probe --manifest quickstart-cpu --dataset mt-bench:reference --perturb none --perturb wrong_answer \\
      --out runs/smol.jsonl
  # judge inline while probing
  userturn probe --manifest qwen3.5-9b --dataset gsm8k --limit 50 --out runs/q9b.jsonl \\
      --judge-base-url http://127.0.0.1:30001/v1 --judge-model Qwen/Qwen3.5-27B
Rerun the same command to resume: records already ok in --out are skipped."""


def check_dataset(args: argparse.Namespace) -> None:
    """--dataset: a built-in name is no path, so only a directory is refused here (a missing file: by its loader)."""
    if isinstance(args.dataset, str) and Path(args.dataset).is_dir():
        raise UserError(f"--dataset {args.dataset}: is a directory; name a JSONL file or a built-in dataset")


PATHS = Paths(inputs=(("chat_template", "--chat-template"),), outputs=(("out", "--out"),), check=check_dataset)


def add_endpoint_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The flags that say which endpoint to probe and how to reach it (the options of `Flag(group="endpoint")` are
    added by `add_probe_arguments`). A flag left out lets the manifest or the default decide (README "Where
    settings come from")."""
    g = parser.add_argument_group("endpoint")
    g.add_argument("--base-url", action="append", default=None, metavar="URL",
                   help="OpenAI-compatible base URL, e.g. http://127.0.0.1:30000/v1 (repeat to round-robin replicas)")
    g.add_argument("--model", help="model name sent in requests (and recorded)")
    g.add_argument("--manifest", metavar="NAME_OR_YAML", help="launch (or point at) the server a manifest describes "
                   "(a file, or a shipped manifest by name: `userturn list`); supplies base URL, model name, "
                   "tokenizer, stops and probe defaults; the server is shut down afterwards")
    g.add_argument("--launcher", choices=["local", "slurm"], default=None,
                   help="with --manifest: run the server as local processes (default) or as a SLURM job")
    add_key_arguments(g)
    return g


def add_probe_arguments(parser: argparse.ArgumentParser, endpoint: argparse._ArgumentGroup) -> None:
    """The probe's own flags, then every option's (`cli.option_flags`, generated from `Options`), then the network
    flags; the four options whose flag is spelled otherwise are written out here."""
    g = parser.add_argument_group("probe")
    g.add_argument("--dataset", required=True,
                   help="local JSONL path, or a built-in dataset NAME[:split] (gsm8k, ifeval, mt-bench, ...)")
    g.add_argument("--dataset-name", default=None, help="name recorded for the dataset (default: file stem / NAME)")
    g.add_argument("--out", required=True, metavar="FILE.jsonl", help="results file (appended; resumable)")
    g.add_argument("--limit", type=positive_int, default=None, metavar="N", help="first N items only")
    g.add_argument("--shuffle-seed", type=int, default=None, help="shuffle items deterministically before --limit")
    g.add_argument("--shard", type=shard_arg, default=None, metavar="I/N",
                   help="probe only shard I of N (items split by a hash of their id, after --limit and "
                        "--shuffle-seed) into --out with `.shard-I-of-N` before its suffix; the N shards together "
                        "write the records of the unsharded run")
    g.add_argument("--perturb", action="append", default=None, metavar="NAME",
                   help=f"perturbation of the assistant turn (repeatable): {', '.join(perturbation_names())} "
                        "(default none; `userturn list perturbations` says what each changes)")
    g.add_argument("--mode", choices=["raw", "chat"], default="raw",
                   help="raw: completion ending at an open user header (default); chat: role-flip via chat API")
    g.add_argument("--assistant-from", choices=["dataset", "model"], default=None,
                   help="where the assistant turn comes from (default: dataset when every item ends with one, "
                        "model when none does; a dataset mixing both is refused until you choose)")
    # the options whose flag is spelled otherwise (`option_flags.SPELLED_OTHERWISE`; read back by `flag_layer`)
    g.add_argument("--temperature", type=non_negative_float, action="append", default=None, metavar="T",
                   help="sampling temperature (repeat for a sweep) (default: the manifest's, else 0)")
    g.add_argument("--enable-thinking", choices=["true", "false"], default=None,
                   help="pass enable_thinking to the chat template (e.g. Qwen3, GLM)")
    g.add_argument("--template-kwarg", action="append", default=None, metavar="KEY=VALUE",
                   help="extra chat-template variable (repeatable), e.g. reasoning_effort=high for gpt-oss; "
                        "VALUE is parsed as JSON when it can be")
    g.add_argument("--scorer", choices=list(SCORERS), default=None,
                   help="task scorer of the items whose meta.scorer names none (default: the dataset's name, if it "
                        "names one; else items get no accuracy): " + scorer_help())
    add_option_flags({"probe": g, "endpoint": endpoint})
    g.add_argument("--no-progress", action="store_true",
                   help="plain progress lines (every 10 s and one at the end) instead of the live view")
    add_network_arguments(endpoint)


def shard_arg(text: str) -> Shard:
    """argparse type of `--shard I/N` (userturn.core.shards)."""
    from userturn.core.shards import Shard

    try:
        return Shard.parse(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "probe",
        help="generate the next user turn for each conversation",
        description="Render each conversation with the model's chat template so the prompt ends at an open user "
                    "header, send it as a raw completion, and stream one JSONL record per generated user turn.",
    )
    add_probe_arguments(parser, add_endpoint_arguments(parser))
    add_judge_arguments(parser)
    return parser


def parse_template_kwargs(pairs: list[str] | None) -> dict[str, Any]:
    """`KEY=VALUE` pairs -> dict; VALUE parsed as JSON when possible (true, 3, "x"), else kept as text."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--template-kwarg {pair!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def flag_layer(args: argparse.Namespace) -> Options:
    """The settings the probe flags give (None where a flag was left out): every option whose flag has its name as
    `dest`, plus the three flags spelled otherwise (--temperature, --enable-thinking, --template-kwarg)."""
    from userturn.core.options import Options

    given = {name: value for name in Options.names() if (value := getattr(args, name, None)) is not None}
    given.update(temperatures=args.temperature,
                 enable_thinking=None if args.enable_thinking is None else args.enable_thinking == "true",
                 chat_template_kwargs=parse_template_kwargs(args.template_kwarg) or None)
    return Options(**given)


def target_source(args: argparse.Namespace) -> TargetSource:
    from userturn.orchestrate.run_builder import TargetSource

    return TargetSource(manifest=args.manifest, base_urls=args.base_url, model=args.model,
                        api_key_env=args.api_key_env, launcher=args.launcher, api_key_file=args.api_key_file)


def run(args: argparse.Namespace) -> int:
    """Parse the flags into the probe's one-cell grid, run it through the front door, print what it did."""
    from userturn.core import aio
    from userturn.orchestrate.grid import run_grid
    from userturn.orchestrate.grid_spec import prepare
    from userturn.orchestrate.probe_job import probe_grid

    grid = probe_grid(dataset=args.dataset, out=args.out, target=target_source(args), options=flag_layer(args),
                      mode=args.mode, perturbations=args.perturb, assistant_from=args.assistant_from,
                      dataset_name=args.dataset_name, limit=args.limit, shuffle_seed=args.shuffle_seed,
                      shard=args.shard, judges=panel_config(args), progress=not args.no_progress)
    configure_network(args)
    prepared = prepare(grid)
    if grid.shard is not None:
        data = prepared.datasets[0]
        print(f"userturn: shard {grid.shard}: {len(data.items)} of the {data.selected} selected items, into "
              f"{grid.out}", file=sys.stderr)
    [summary] = aio.run(run_grid(prepared))
    return report_summary(summary, str(grid.out), prepared.notices)


def report_summary(summary: ProbeSummary, out: str, notices: Sequence[str] = ()) -> int:
    """The run's closing lines on stderr (`notices`, e.g. answers no scorer reads, among them); the exit status."""
    print(
        f"userturn: wrote {summary.ok + summary.errors} records to {out} (ok {summary.ok}, errors {summary.errors}, "
        f"already done {summary.skipped}) in {summary.elapsed_s:.1f}s ({summary.req_per_s:.1f} req/s)",
        file=sys.stderr,
    )
    if summary.rejudged:
        print(f"userturn: judged {summary.rejudged} records of earlier runs that had no complete label from this "
              "judge panel (their generations were kept)", file=sys.stderr)
    status = print_failures(summary.not_applicable, summary.errors, summary.judge_failures, out)
    for notice in notices:
        print(notice, file=sys.stderr)
    print(next_step(summary, out), file=sys.stderr)
    return status


def print_failures(not_applicable: int, errors: int, judge_failures: int, out: str) -> int:
    """The lines on skipped samples, failed samples and failed judgements of a probe or run (on stderr); 1 when a
    sample or a judgement failed, else 0."""
    if not_applicable:
        print(f"userturn: {not_applicable} samples skipped: their perturbation does not apply to the item "
              "(e.g. wrong_answer without a number)", file=sys.stderr)
    if errors:
        print(f"userturn: {errors} samples failed (see `error` in {out}); rerun the same command to retry them",
              file=sys.stderr)
    if judge_failures:
        from userturn.judges.panel import judge_failure_line

        print(judge_failure_line("userturn", judge_failures, out), file=sys.stderr)
    return 1 if errors or judge_failures else 0


def next_step(summary: ProbeSummary, out: str) -> str:
    """The command to run next: the report when the records were judged inline, else the judge."""
    if summary.judged or summary.judge_failures or summary.rejudged:
        return f"next: userturn report {out} (add --html report.html --plots figures/ for the figures)"
    return (f"next: label the turns with a judge model: userturn judge {out} --judge-base-url URL --judge-model NAME "
            f"(then userturn report {out.removesuffix('.jsonl')}.judged.jsonl)")
