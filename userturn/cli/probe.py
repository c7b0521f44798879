"""`userturn probe`: generate the next user turn for every conversation of a dataset."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from userturn.cli.argtypes import (
    at_least,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
    unit_interval,
)
from userturn.cli.judge_arguments import add_judge_arguments, panel_config
from userturn.cli.key_args import add_key_arguments
from userturn.client.probe.perturbations import names as perturbation_names
from userturn.client.probe.scoring import SCORERS, scorer_help
from userturn.core import defaults
from userturn.core.errors import UserError

if TYPE_CHECKING:  # the heavy modules (pydantic, asyncio) load when a command runs, not when the parser is built
    from userturn.client.probe.pipeline import ProbeSummary
    from userturn.core.options import Options
    from userturn.core.shards import Shard
    from userturn.orchestrate.run_builder import TargetSource

NOT_SET = "(default: the manifest's, else {})"  # help text of a flag whose unset value lets lower layers decide


def add_endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every command that talks to a model endpoint. A flag left out lets the manifest or the
    default decide (README "Where settings come from")."""
    d = defaults
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
    g.add_argument("--concurrency", type=positive_int, default=None,
                   help=f"requests in flight (default {d.CONCURRENCY})")
    g.add_argument("--rpm", type=positive_float, default=None, help="requests-per-minute limit")
    g.add_argument("--tpm", type=positive_float, default=None, help="tokens-per-minute limit (prompt + max tokens)")
    g.add_argument("--request-timeout", type=positive_float, default=None, metavar="S",
                   help=f"per-attempt deadline in seconds; a hung request is cut and retried (default "
                        f"{d.REQUEST_TIMEOUT_S:g})")
    g.add_argument("--max-retries", type=non_negative_int, default=None,
                   help=f"retries after the first attempt (default {d.MAX_RETRIES})")
    g.add_argument("--max-response-bytes", type=positive_int, default=None, metavar="B",
                   help="cap on each response body (default: 256 bytes per requested token + 1 MiB)")
    add_network_arguments(g)


def add_network_arguments(g: argparse._ArgumentGroup) -> None:
    """--proxy, --ca-bundle and --no-model-check: how this process reaches its endpoints (client.http.http_client)."""
    g.add_argument("--proxy", default=None, metavar="URL",
                   help="HTTP proxy for every request, e.g. http://proxy:3128 (default $USERTURN_PROXY; wins over "
                        "HTTPS_PROXY / HTTP_PROXY / NO_PROXY, which are honoured otherwise)")
    g.add_argument("--ca-bundle", default=None, metavar="FILE",
                   help="PEM file (or directory) of the certificate authorities to trust for HTTPS (wins over "
                        "SSL_CERT_FILE / SSL_CERT_DIR)")
    g.add_argument("--no-model-check", action="store_true",
                   help="send requests even when the endpoint's /models list does not name the model (routers and "
                        "gateways)")


PROXY_ENV = "USERTURN_PROXY"  # the proxy when --proxy is not given: how `run --workers` hands its shards a proxy


def configure_network(args: argparse.Namespace) -> None:
    """Apply --proxy (else $USERTURN_PROXY), --ca-bundle and --no-model-check to every endpoint this process opens."""
    import os

    from userturn.client.http.http_client import configure

    configure(proxy=args.proxy or os.environ.get(PROXY_ENV) or None, ca_bundle=args.ca_bundle,
              check_model=not args.no_model_check)


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    d = defaults
    g = parser.add_argument_group("probe")
    g.add_argument("--dataset", required=True,
                   help="local JSONL path, or a built-in dataset NAME[:split] (gsm8k, ifeval, mt-bench, ...)")
    g.add_argument("--dataset-name", default=None, help="name recorded for the dataset (default: file stem / NAME)")
    g.add_argument("--out", required=True, metavar="FILE.jsonl", help="results file (appended; resumable)")
    g.add_argument("--tokenizer", default=None, metavar="DIR_HUB_ID_OR_GGUF",
                   help="tokenizer with the model's chat template (local dir, hub id, or a .gguf file / "
                        "pkg:PACKAGE/file.gguf: its metadata); required in raw mode")
    g.add_argument("--chat-template", default=None, metavar="FILE", help="override the tokenizer's chat template")
    g.add_argument("--renderer", choices=["auto", "chat_template", "harmony"], default=None,
                   help="how prompts are rendered: the chat template, or Harmony (gpt-oss); default: the manifest's, "
                        "else auto (Harmony for a gpt-oss tokenizer without --chat-template)")
    g.add_argument("--enable-thinking", choices=["true", "false"], default=None,
                   help="pass enable_thinking to the chat template (e.g. Qwen3, GLM)")
    g.add_argument("--template-kwarg", action="append", default=None, metavar="KEY=VALUE",
                   help="extra chat-template variable (repeatable), e.g. reasoning_effort=high for gpt-oss; "
                        "VALUE is parsed as JSON when it can be")
    g.add_argument("--temperature", type=non_negative_float, action="append", default=None, metavar="T",
                   help="sampling temperature (repeat for a sweep) " + NOT_SET.format("0"))
    g.add_argument("--samples", type=positive_int, default=None, metavar="K",
                   help=f"samples per item and temperature (default {d.SAMPLES})")
    g.add_argument("--max-tokens", type=positive_int, default=None, metavar="M",
                   help="max tokens of the user turn " + NOT_SET.format(d.MAX_TOKENS))
    g.add_argument("--top-p", type=probability, default=None, metavar="P",
                   help="nucleus sampling, in (0, 1] " + NOT_SET.format("the engine's neutral value, 1"))
    g.add_argument("--top-k", type=at_least(-1, " (-1: no limit)"), default=None, metavar="K",
                   help="top-k sampling " + NOT_SET.format("the engine's neutral value where it takes top_k, else "
                                                           "not sent"))
    g.add_argument("--min-p", type=unit_interval, default=None, metavar="P",
                   help="min-p sampling, in [0, 1] " + NOT_SET.format("the engine's neutral value, 0, where it takes "
                                                                      "min_p, else not sent"))
    g.add_argument("--seed", type=int, default=None, metavar="S",
                   help=f"run seed; each sample's seed derives from it (default {d.SEED})")
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
    g.add_argument("--assistant-temperature", type=non_negative_float, default=None, metavar="T",
                   help=f"temperature of a model-written assistant turn (default {d.ASSISTANT_TEMPERATURE:g})")
    g.add_argument("--assistant-max-tokens", type=positive_int, default=None, metavar="M",
                   help=f"max tokens of a model-written assistant turn (default {d.ASSISTANT_MAX_TOKENS})")
    g.add_argument("--send-stop-token-ids", action="store_true", default=None,
                   help="also send stop_token_ids (SGLang/vLLM extension; needed where the end-of-turn token "
                        "is not an EOS, e.g. gpt-oss <|end|>) " + NOT_SET.format("off"))
    g.add_argument("--scorer", choices=list(SCORERS), default=None,
                   help="task scorer of the items whose meta.scorer names none (default: the dataset's name, if it "
                        "names one; else items get no accuracy): " + scorer_help())
    g.add_argument("--allow-special-tokens", action="store_true", default=None,
                   help="probe items whose messages contain the tokenizer's special tokens (refused by default: they "
                        "forge turns); their records get special_tokens_in_content: true")
    g.add_argument("--controls", action="store_true", default=None,
                   help="also write, without generating, each item's own human next turn (model human) and another "
                        "item's (model human-shuffled) where the dataset has one (meta.second_turn, e.g. mt-bench): "
                        "judged like any record, they show whether the judge tells them apart")
    g.add_argument("--no-progress", action="store_true",
                   help="plain progress lines (every 10 s and one at the end) instead of the live view")


def shard_arg(text: str) -> Shard:
    """argparse type of `--shard I/N` (userturn.core.shards)."""
    from userturn.core.shards import Shard

    try:
        return Shard.parse(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "probe",
        help="generate the next user turn for each conversation",
        description="Render each conversation with the model's chat template so the prompt ends at an open user "
                    "header, send it as a raw completion, and stream one JSONL record per generated user turn.",
    )
    add_endpoint_arguments(parser)
    add_probe_arguments(parser)
    add_judge_arguments(parser)
    parser.set_defaults(func=probe_command)


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


def check_conflicts(args: argparse.Namespace) -> None:
    """Flags that contradict each other, refused before any dataset loads or any server launches."""
    if args.manifest and args.base_url:
        raise UserError("--manifest launches its own server and --base-url points elsewhere: give one of them "
                        "(--manifest NAME, or --base-url URL --model NAME)")
    if args.launcher and not args.manifest:
        raise UserError("--launcher goes with --manifest (it says where the manifest's server runs)")
    if not args.manifest and not args.base_url:
        raise UserError("--base-url or --manifest is required")
    if args.assistant_from == "dataset":
        given = [flag for flag, value in (("--assistant-temperature", args.assistant_temperature),
                                          ("--assistant-max-tokens", args.assistant_max_tokens)) if value is not None]
        if given:
            raise UserError(f"{' and '.join(given)} set how the model writes the assistant turn, but "
                            "--assistant-from dataset takes it from the dataset")
    if args.mode == "chat" and (args.chat_template or args.renderer == "harmony"):
        flag = "--chat-template" if args.chat_template else "--renderer harmony"
        raise UserError(f"{flag} renders raw prompts; --mode chat sends messages to the server's chat API")


def probe_command(args: argparse.Namespace) -> int:
    from userturn.core import aio

    check_conflicts(args)
    configure_network(args)
    return aio.run(probe_main(args))


async def probe_main(args: argparse.Namespace) -> int:
    from userturn.client.data.loaders import load_items
    from userturn.client.probe.perturb import needs_partner, validate
    from userturn.client.probe.scoring import preflight, unscored_notice
    from userturn.core.results_lock import results_lock
    from userturn.core.shards import check_split, sharded_path
    from userturn.orchestrate.run_builder import TargetSession, assistant_source, open_target, preview

    perturbations = validate(args.perturb or ["none"])
    check_split(args.out, args.shard)
    name, items, every = load_items(args.dataset, limit=args.limit, shuffle_seed=args.shuffle_seed,
                                    whole=needs_partner(perturbations) or bool(args.controls))
    dataset_name = args.dataset_name or name
    chosen = preview(target_source(args), [flag_layer(args)])[1].scorer  # the flag, else the manifest's
    preflight(dataset_name, items, chosen)
    notice = unscored_notice(dataset_name, items, chosen, "--scorer")  # said with the run's summary
    # decided on every selected item, so each shard of a run takes its assistant turns from the same source
    args.assistant_from = assistant_source(items, args.assistant_from)  # an impossible choice stops before launch
    if args.shard is not None:  # cut after --limit and --shuffle-seed; swap partners still come from every item
        selected = len(items)
        items = args.shard.select(items)
        args.out = str(sharded_path(args.out, args.shard))
        print(f"userturn: shard {args.shard}: {len(items)} of the {selected} selected items, into {args.out}",
              file=sys.stderr)
    # the lock first: a second writer stops before any launch
    with results_lock(args.out), open_target(target_source(args), [flag_layer(args)]) as (target, options):
        async with TargetSession(target, options) as session:
            if args.mode == "raw":
                session.renderer  # noqa: B018 - load the chat template before any request: a bad one stops here
            await session.check()
            judge = await _judge_panel(args)
            try:
                run = session.probe_run(items, dataset=dataset_name, mode=args.mode, perturbations=perturbations,
                                        assistant_from=args.assistant_from, out_path=args.out, judge=judge,
                                        progress=not args.no_progress, partner_pool=every)
                summary = await run.run()
            finally:
                if judge is not None:
                    await judge.aclose()
    return report_summary(summary, args.out, notice)


async def _judge_panel(args: argparse.Namespace) -> Any:
    """The inline judge panel from --judge-* flags, checked before any generation; None without judges."""
    config = panel_config(args)
    if config is None:
        return None
    from userturn.judges.panel import make_panel

    panel = make_panel(config)
    try:
        await panel.check()
    except BaseException:
        await panel.aclose()  # its HTTP clients: a refused preflight leaves no unclosed session behind
        raise
    return panel


def report_summary(summary: ProbeSummary, out: str, notice: str | None = None) -> int:
    """The run's closing lines on stderr (`notice`, e.g. answers no scorer reads, among them); the exit status."""
    print(
        f"userturn: wrote {summary.ok + summary.errors} records to {out} (ok {summary.ok}, errors {summary.errors}, "
        f"already done {summary.skipped}) in {summary.elapsed_s:.1f}s ({summary.req_per_s:.1f} req/s)",
        file=sys.stderr,
    )
    if summary.rejudged:
        print(f"userturn: judged {summary.rejudged} records of earlier runs that had no complete label from this "
              "judge panel (their generations were kept)", file=sys.stderr)
    status = print_failures(summary.not_applicable, summary.errors, summary.judge_failures, out)
    if notice is not None:
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
