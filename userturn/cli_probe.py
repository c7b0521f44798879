"""`userturn probe`: generate the next user turn for every conversation of a dataset."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from userturn import collector
from userturn.errors import UserError

if TYPE_CHECKING:  # the heavy modules load when a command runs, not when the parser is built
    from userturn.client.dataset import DatasetItem
    from userturn.client.pipeline import ProbeSettings, ProbeSummary


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def add_endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every command that talks to a model endpoint."""
    g = parser.add_argument_group("endpoint")
    g.add_argument("--base-url", action="append", default=None, metavar="URL",
                   help="OpenAI-compatible base URL, e.g. http://127.0.0.1:30000/v1 (repeat to round-robin replicas)")
    g.add_argument("--model", help="model name sent in requests (and recorded)")
    g.add_argument("--manifest", metavar="YAML", help="launch (or point at) the server a manifest describes; "
                   "supplies base URL, model name, tokenizer and stops; the server is shut down afterwards")
    g.add_argument("--launcher", choices=["local", "slurm"], default=None,
                   help="with --manifest: run the server as local processes (default) or as a SLURM job")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (optional for local servers; never written)")
    g.add_argument("--concurrency", type=positive_int, default=64, help="requests in flight (default 64)")
    g.add_argument("--rpm", type=positive_float, default=None, help="requests-per-minute limit")
    g.add_argument("--tpm", type=positive_float, default=None, help="tokens-per-minute limit (prompt + max tokens)")
    g.add_argument("--request-timeout", type=positive_float, default=300.0, metavar="S",
                   help="per-attempt deadline in seconds; a hung request is cut and retried (default 300)")
    g.add_argument("--max-retries", type=non_negative_int, default=5,
                   help="retries after the first attempt (default 5)")
    g.add_argument("--max-response-bytes", type=positive_int, default=None, metavar="B",
                   help="cap on each response body (default: 256 bytes per requested token + 1 MiB)")
    g.add_argument("--http-backend", choices=["aiohttp", "httpx"], default="aiohttp",
                   help="aiohttp (default, fastest) or httpx (the httpx API, e.g. for respx or httpx proxies)")


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("probe")
    g.add_argument("--dataset", required=True,
                   help="local JSONL path, or a built-in dataset NAME[:split] (gsm8k, ifeval, mt-bench, ...)")
    g.add_argument("--dataset-name", default=None, help="name recorded for the dataset (default: file stem / NAME)")
    g.add_argument("--out", required=True, metavar="FILE.jsonl", help="results file (appended; resumable)")
    g.add_argument("--tokenizer", default=None, metavar="DIR_HUB_ID_OR_GGUF",
                   help="tokenizer with the model's chat template (local dir, hub id, or a .gguf file / "
                        "pkg:PACKAGE/file.gguf: its metadata); required in raw mode")
    g.add_argument("--chat-template", default=None, metavar="FILE", help="override the tokenizer's chat template")
    g.add_argument("--enable-thinking", choices=["true", "false"], default=None,
                   help="pass enable_thinking to the chat template (e.g. Qwen3, GLM)")
    g.add_argument("--template-kwarg", action="append", default=None, metavar="KEY=VALUE",
                   help="extra chat-template variable (repeatable), e.g. reasoning_effort=high for gpt-oss; "
                        "VALUE is parsed as JSON when it can be")
    g.add_argument("--temperature", type=non_negative_float, action="append", default=None, metavar="T",
                   help="sampling temperature (repeat for a sweep; default 0)")
    g.add_argument("--samples", type=positive_int, default=1, metavar="K", help="samples per item and temperature")
    g.add_argument("--max-tokens", type=positive_int, default=None, metavar="M",
                   help="max tokens of the user turn (default: manifest probe default, else 256)")
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=0, metavar="S", help="run seed; each sample's seed derives from it")
    g.add_argument("--limit", type=positive_int, default=None, metavar="N", help="first N items only")
    g.add_argument("--shuffle-seed", type=int, default=None, help="shuffle items deterministically before --limit")
    g.add_argument("--perturb", action="append", default=None, metavar="NAME",
                   help="perturbation of the assistant turn (repeatable): none, wrong_answer, truncate, swap, "
                        "remove, generic (default none)")
    g.add_argument("--mode", choices=["raw", "chat"], default="raw",
                   help="raw: completion ending at an open user header (default); chat: role-flip via chat API")
    g.add_argument("--assistant-from", choices=["dataset", "model"], default=None,
                   help="where the assistant turn comes from (default: dataset if the item ends with one, "
                        "else model)")
    g.add_argument("--assistant-temperature", type=non_negative_float, default=0.0)
    g.add_argument("--assistant-max-tokens", type=positive_int, default=1024)
    g.add_argument("--send-stop-token-ids", action="store_true",
                   help="also send stop_token_ids (SGLang/vLLM extension; needed where the end-of-turn token "
                        "is not an EOS, e.g. gpt-oss <|end|>)")
    g.add_argument("--allow-special-tokens", action="store_true",
                   help="probe items whose messages contain the tokenizer's special tokens (refused by default: they "
                        "forge turns); their records get special_tokens_in_content: true")
    g.add_argument("--no-progress", action="store_true", help="plain periodic lines instead of the live view")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "probe",
        help="generate the next user turn for each conversation",
        description="Render each conversation with the model's chat template so the prompt ends at an open user "
                    "header, send it as a raw completion, and stream one JSONL record per generated user turn.",
    )
    add_endpoint_arguments(parser)
    add_probe_arguments(parser)
    _add_judge_arguments(parser)
    parser.set_defaults(func=probe_command, loads_inputs_first=True)


def _add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    from userturn.judges import add_judge_arguments

    add_judge_arguments(parser)


def load_items(spec: str, *, limit: int | None, shuffle_seed: int | None, whole: bool = False,
               ) -> tuple[str, Sequence[DatasetItem], Sequence[DatasetItem] | None]:
    """A local JSONL file or a built-in dataset name -> (dataset name, items, every item when `whole`).

    `swap` takes its partners from every item of the dataset, so --limit and --shuffle-seed never change them.
    """
    from userturn.client.loaders import load_dataset_spec, select

    if not whole:
        return (*load_dataset_spec(spec, limit=limit, shuffle_seed=shuffle_seed), None)
    name, every = load_dataset_spec(spec, limit=None, shuffle_seed=None)
    return name, select(every, limit=limit, shuffle_seed=shuffle_seed), every


def merged_template_kwargs(kwargs: dict[str, Any] | None, enable_thinking: bool | None) -> dict[str, Any]:
    """The chat-template variables a renderer gets (what `PromptRenderer.load` passes), as recorded in `config`."""
    merged = dict(kwargs or {})
    if enable_thinking is not None:
        merged["enable_thinking"] = enable_thinking
    return merged


def probe_command(args: argparse.Namespace) -> int:
    return run_async(probe_main(args))


def run_async(coro: Any) -> Any:
    """Run a coroutine on uvloop where available."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - windows
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


@contextlib.contextmanager
def serving(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """Resolve base URLs / model / tokenizer from flags, or launch the manifest's server for the duration."""
    launcher = getattr(args, "launcher", None)
    if not args.manifest:
        if launcher:
            raise UserError("--launcher goes with --manifest")
        if not args.base_url:
            raise UserError("--base-url or --manifest is required")
        if not args.model:
            raise UserError("--model is required with --base-url")
        yield {"base_urls": args.base_url, "model": args.model, "probe": {}, "api_key_env": args.api_key_env}
        return
    from userturn.packaged import is_gguf
    from userturn.serve.launcher import launch
    from userturn.serve.manifest import load_manifest

    manifest = load_manifest(args.manifest)
    with launch(manifest, launcher=launcher or "local") as server:
        probe_defaults = manifest.probe.model_dump(exclude_none=True)
        for key in ("tokenizer", "chat_template"):  # ./x and ../x are relative to the manifest
            if key in probe_defaults:
                probe_defaults[key] = manifest.resolve_path(probe_defaults[key])
        if "tokenizer" not in probe_defaults and is_gguf(manifest.model):  # the GGUF metadata has the template
            probe_defaults["tokenizer"] = manifest.resolve_path(manifest.model)
        yield {
            "base_urls": args.base_url or server.base_urls,
            "model": args.model or server.model_name,
            "probe": probe_defaults,
            "api_key_env": server.api_key_env or args.api_key_env,
        }


def build_renderer(tokenizer: str | None, chat_template: str | None, enable_thinking: bool | None,
                   template_kwargs: dict[str, Any] | None = None):
    from userturn.client.templates import PromptRenderer

    if not tokenizer:
        raise UserError("--tokenizer is required in raw mode (the model's chat template renders the prompt)")
    return PromptRenderer.load(tokenizer, chat_template=chat_template, enable_thinking=enable_thinking,
                               template_kwargs=template_kwargs or None)


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


def pipeline_hooks() -> dict[str, Any]:
    """Perturbations, task scoring and the chat-mode role flip."""
    from userturn.client.chat_mode import role_flip_messages
    from userturn.client.perturb import perturb
    from userturn.client.scoring import score

    return {"perturb": perturb, "scorer": score, "role_flip": role_flip_messages}


def _bool(value: str | None) -> bool | None:
    return None if value is None else value == "true"


async def probe_main(args: argparse.Namespace) -> int:
    from userturn.client.perturb import validate
    from userturn.client.pipeline import ProbeSettings
    from userturn.client.scoring import preflight
    from userturn.results_lock import results_lock

    perturbations = validate(args.perturb or ["none"])
    name, items, every = load_items(args.dataset, limit=args.limit, shuffle_seed=args.shuffle_seed,
                                    whole="swap" in perturbations)
    dataset_name = args.dataset_name or name
    preflight(dataset_name, items)
    with results_lock(args.out), serving(args) as server:  # the lock first: a second writer stops before any launch
        defaults = server["probe"]
        tokenizer = args.tokenizer or defaults.get("tokenizer")
        enable_thinking = _bool(args.enable_thinking)
        if enable_thinking is None:
            enable_thinking = defaults.get("enable_thinking")
        renderer = None
        template_kwargs = merged_template_kwargs({**(defaults.get("chat_template_kwargs") or {}),
                                                  **parse_template_kwargs(args.template_kwarg)}, enable_thinking)
        if args.mode == "raw":
            renderer = build_renderer(tokenizer, args.chat_template or defaults.get("chat_template"),
                                      enable_thinking, template_kwargs)
        ended = getattr(items, "all_end_with_assistant", None)  # known without parsing for a file kept on disk
        if ended is None:
            ended = all(i.ends_with_assistant for i in items)
        assistant_from = args.assistant_from or ("dataset" if ended else "model")
        settings = ProbeSettings(
            model=server["model"],
            dataset=dataset_name,
            temperatures=args.temperature or defaults.get("temperatures") or [0.0],
            samples=args.samples,
            max_tokens=args.max_tokens or defaults.get("max_tokens") or 256,
            seed=args.seed,
            top_p=args.top_p if args.top_p is not None else defaults.get("top_p"),
            perturbations=perturbations,
            mode=args.mode,
            assistant_from=assistant_from,
            assistant_temperature=args.assistant_temperature,
            assistant_max_tokens=args.assistant_max_tokens,
            send_stop_token_ids=args.send_stop_token_ids or bool(defaults.get("send_stop_token_ids")),
            concurrency=args.concurrency,
            rpm=args.rpm,
            tpm=args.tpm,
            extra_body=dict(defaults.get("extra_body") or {}),
            extra_stop=list(defaults.get("stop") or []),
            extra_stop_token_ids=list(defaults.get("stop_token_ids") or []),
            template_kwargs=template_kwargs if args.mode == "raw" else {},
            record_meta=dict(defaults.get("record_meta") or {}),
        )
        summary = await execute(items, settings, args, server["base_urls"], renderer, server["api_key_env"],
                                swap_pool=every)
    return report_summary(summary, args.out)


async def execute(items: list[DatasetItem], settings: ProbeSettings, args: argparse.Namespace,
                  base_urls: list[str], renderer: Any, api_key_env: str,
                  swap_pool: list[DatasetItem] | None = None) -> ProbeSummary:
    from userturn.client.endpoint import Endpoint, EndpointConfig
    from userturn.client.pipeline import ProbeRun

    endpoints = [
        Endpoint(EndpointConfig(base_url=url, api_key_env=api_key_env, request_timeout=args.request_timeout,
                                max_retries=args.max_retries, concurrency=settings.concurrency,
                                http_backend=args.http_backend, max_response_bytes=args.max_response_bytes))
        for url in base_urls
    ]
    judge = None
    try:
        for endpoint in endpoints:
            await endpoint.check()
        judge = await _judge_panel(args)
        run = ProbeRun(items, settings, endpoints=endpoints, renderer=renderer, out_path=args.out, judge=judge,
                       progress=not args.no_progress, allow_special_tokens=args.allow_special_tokens,
                       swap_pool=swap_pool, **pipeline_hooks())
        collector.release()  # inputs are loaded: collect again for the run itself
        return await run.run()
    finally:
        if judge is not None:
            await judge.aclose()
        for endpoint in endpoints:
            await endpoint.aclose()


async def _judge_panel(args: argparse.Namespace) -> Any:
    """The inline judge panel from --judge-* flags, checked before any generation; None without judges."""
    if not args.judge_model and not args.judge_base_url:
        return None  # nothing to judge with: skip loading the judge modules (start-up time)
    from userturn.judges import panel_from_args

    panel = panel_from_args(args)
    if panel is not None:
        await panel.check()
    return panel


def report_summary(summary: ProbeSummary, out: str) -> int:
    print(
        f"userturn: wrote {summary.ok + summary.errors} records to {out} (ok {summary.ok}, errors {summary.errors}, "
        f"already done {summary.skipped}) in {summary.elapsed_s:.1f}s ({summary.req_per_s:.1f} req/s)",
        file=sys.stderr,
    )
    if summary.not_applicable:
        print(f"userturn: {summary.not_applicable} samples skipped: their perturbation does not apply to the item "
              "(e.g. wrong_answer without a number)", file=sys.stderr)
    if summary.rejudged:
        print(f"userturn: judged {summary.rejudged} records of earlier runs that had no complete label from this "
              "judge panel (their generations were kept)", file=sys.stderr)
    status = 0
    if summary.errors:
        print(f"userturn: {summary.errors} samples failed (see `error` in {out}); rerun the same command to retry "
              "them", file=sys.stderr)
        status = 1
    if summary.judge_failures:
        from userturn.judges.panel import judge_failure_line

        print(judge_failure_line("userturn", summary.judge_failures, out), file=sys.stderr)
        status = 1
    return status
