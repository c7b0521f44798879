"""The judge flags and the panel they describe (kept free of heavy imports: every parser is built at start-up)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from userturn.cli.argtypes import (
    at_least,
    json_object,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from userturn.cli.key_args import add_key_arguments
from userturn.core import defaults
from userturn.core.errors import UserError

if TYPE_CHECKING:
    from userturn.judges.panel import PanelConfig

judge_max_tokens = at_least(defaults.MIN_JUDGE_MAX_TOKENS,
                            " (a JSON verdict needs about 15 tokens, more for reasoning judges)")


def add_judge_arguments(parser: argparse.ArgumentParser, *, required: bool = False,
                        concurrency_flags: tuple[str, ...] = ("--judge-concurrency",), resumable: bool = True) -> None:
    """The judge flags, shared by `userturn probe` (inline judging), `judge` and `judge-eval` (not resumable: no
    `--rejudge`). Every judge setting is spelled `--judge-*` on every command; `judge` and `judge-eval`, which have
    no other endpoint, also accept `--concurrency` for `--judge-concurrency` (`concurrency_flags`)."""
    group = parser.add_argument_group("judge")
    group.add_argument("--judge-model", action="append", default=None, metavar="NAME", required=required,
                       help="judge model name; repeat for a panel (label = majority, ties go to the first listed)")
    group.add_argument("--judge-base-url", action="append", default=None, metavar="URL",
                       help="OpenAI-compatible base URL of the judge (e.g. http://127.0.0.1:30000/v1); give once "
                            "for all judges or once per --judge-model, in the same order")
    add_key_arguments(group, judge=True)
    d = defaults
    group.add_argument("--judge-max-tokens", type=judge_max_tokens, default=d.JUDGE_MAX_TOKENS, metavar="N",
                       help=f"max tokens per judge reply, at least {d.MIN_JUDGE_MAX_TOKENS}; leave room for reasoning "
                            f"judges (default {d.JUDGE_MAX_TOKENS})")
    group.add_argument("--judge-temperature", type=non_negative_float, default=d.JUDGE_TEMPERATURE, metavar="T",
                       help=f"default {d.JUDGE_TEMPERATURE:g}")
    group.add_argument("--judge-timeout", type=positive_float, default=d.REQUEST_TIMEOUT_S, metavar="S",
                       help=f"per-request deadline in seconds (default {d.REQUEST_TIMEOUT_S:g})")
    group.add_argument("--judge-max-retries", type=non_negative_int, default=d.MAX_RETRIES, metavar="N",
                       help=f"HTTP retries per judge request (429/5xx/timeouts; default {d.MAX_RETRIES})")
    group.add_argument("--judge-reasks", type=non_negative_int, default=d.JUDGE_REASKS, metavar="N",
                       help=f"re-ask a judge whose reply is not a valid verdict up to N times (default "
                            f"{d.JUDGE_REASKS})")
    group.add_argument(*concurrency_flags, dest="judge_concurrency", type=positive_int, default=d.JUDGE_CONCURRENCY,
                       metavar="C", help=f"judge requests in flight per judge (default {d.JUDGE_CONCURRENCY})"
                       + ("; --concurrency is the same flag here" if len(concurrency_flags) > 1 else ""))
    group.add_argument("--judge-extra-body", type=json_object, default=None, metavar="JSON",
                       help='JSON object merged into each judge request, e.g. \'{"chat_template_kwargs": '
                            '{"enable_thinking": false}}\'')
    group.add_argument("--judge-prompt", default=None, metavar="FILE.md|judge_vN",
                       help=f"judge prompt: a file, or a packaged version by name (default {defaults.JUDGE_PROMPT}; "
                            "earlier versions are kept for reproducing earlier verdicts)")
    group.add_argument("--judge-all", action="store_true",
                       help="also send records labelled by a pre-label rule (empty, restatement, role leak) to "
                            "the judges")
    if not resumable:
        return
    group.add_argument("--rejudge", action="store_true",
                       help="the file holds labels of another judge panel (other judge models or prompt): label "
                            "those records again with this panel instead of refusing")


def _per_judge(values: list[str] | None, n: int, flag: str, default: str | None) -> list[str]:
    if not values:
        if default is None:
            raise UserError(f"{flag} is required with --judge-model")
        return [default] * n
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise UserError(f"give {flag} once, or once per --judge-model ({n}); got {len(values)}")
    return values


def panel_config(args: argparse.Namespace) -> PanelConfig | None:
    """The typed panel the judge flags describe (what `judges.panel.make_panel` takes); None without --judge-model.
    The only place that reads the judge flags; loads the judge modules only when there are judges."""
    models: list[str] | None = args.judge_model
    if not models:
        if args.judge_base_url:
            raise UserError("--judge-base-url given without --judge-model")
        return None
    from userturn.judges.llm_judge import JudgeConfig
    from userturn.judges.panel import PanelConfig

    urls = _per_judge(args.judge_base_url, len(models), "--judge-base-url", None)
    keys = _per_judge(args.judge_api_key_env, len(models), "--judge-api-key-env", defaults.API_KEY_ENV)
    files: list[str | None] = [*_per_judge(args.judge_api_key_file, len(models), "--judge-api-key-file", "")]
    judges = [
        JudgeConfig(model=m, base_url=u, api_key_env=k, api_key_file=f or None, temperature=args.judge_temperature,
                    max_tokens=args.judge_max_tokens, request_timeout=args.judge_timeout,
                    max_retries=args.judge_max_retries, reasks=args.judge_reasks,
                    concurrency=args.judge_concurrency, extra_body=args.judge_extra_body or {})
        for m, u, k, f in zip(models, urls, keys, files, strict=True)
    ]
    return PanelConfig(judges=judges, judge_all=args.judge_all, force=bool(getattr(args, "force", False)),
                       rejudge=bool(getattr(args, "rejudge", False)),
                       keep_other_verdicts=bool(getattr(args, "keep_verdicts", False)), prompt_path=args.judge_prompt)
