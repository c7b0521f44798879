"""The judge flags, kept free of heavy imports so every subcommand parser can be built quickly."""

from __future__ import annotations

import argparse


def add_judge_arguments(parser: argparse.ArgumentParser, *, required: bool = False,
                        concurrency_flags: tuple[str, ...] = ("--judge-concurrency",)) -> None:
    """The judge flags, shared by `userturn probe` (inline judging), `judge` and `judge-eval`."""
    group = parser.add_argument_group("judge")
    group.add_argument("--judge-model", action="append", default=None, metavar="NAME", required=required,
                       help="judge model name; repeat for a panel (label = majority, ties go to the first listed)")
    group.add_argument("--judge-base-url", action="append", default=None, metavar="URL",
                       help="OpenAI-compatible base URL of the judge (e.g. http://127.0.0.1:30000/v1); give once "
                            "for all judges or once per --judge-model, in the same order")
    group.add_argument("--judge-api-key-env", action="append", default=None, metavar="VAR",
                       help="env var holding the judge API key (default OPENAI_API_KEY); once, or once per judge")
    group.add_argument("--judge-max-tokens", type=int, default=4096, metavar="N",
                       help="max tokens per judge reply; leave room for reasoning judges (default 4096)")
    group.add_argument("--judge-temperature", type=float, default=0.0, metavar="T", help="default 0")
    group.add_argument("--judge-timeout", type=float, default=300.0, metavar="S", help="per-request deadline")
    group.add_argument("--judge-max-retries", type=int, default=5, metavar="N",
                       help="HTTP retries per judge request (429/5xx/timeouts; default 5)")
    group.add_argument("--judge-reasks", type=int, default=2, metavar="N",
                       help="re-ask a judge whose reply is not a valid verdict up to N times (default 2)")
    group.add_argument(*concurrency_flags, dest="judge_concurrency", type=int, default=16, metavar="C",
                       help="judge requests in flight per judge (default 16)")
    group.add_argument("--judge-extra-body", default=None, metavar="JSON",
                       help='JSON merged into each judge request, e.g. \'{"chat_template_kwargs": '
                            '{"enable_thinking": false}}\'')
    group.add_argument("--judge-prompt", default=None, metavar="FILE.md",
                       help="judge prompt file (default: the packaged judges/prompts/judge_v1.md)")
    group.add_argument("--judge-all", action="store_true",
                       help="also send records labelled by a pre-label rule (empty, restatement, role leak) to "
                            "the judges")
