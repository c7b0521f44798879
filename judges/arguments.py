"""The judge flags, kept free of heavy imports so every subcommand parser can be built quickly.

Every value is checked by its argparse type, so a bad one is a usage error (exit 2) naming the flag; nothing is
clamped silently.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

MIN_JUDGE_MAX_TOKENS = 16  # the shortest verdict, {"rationale": "", "label": "generic"}, is about 15 tokens


def _number(text: str, kind: type) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def judge_max_tokens(text: str) -> int:
    value = _number(text, int)
    if value < MIN_JUDGE_MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_JUDGE_MAX_TOKENS} (a JSON verdict needs about 15 "
                                         f"tokens, more for reasoning judges), got {value}")
    return value


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value


def add_judge_arguments(parser: argparse.ArgumentParser, *, required: bool = False,
                        concurrency_flags: tuple[str, ...] = ("--judge-concurrency",), resumable: bool = True) -> None:
    """The judge flags, shared by `userturn probe` (inline judging), `judge` and `judge-eval` (not resumable: no
    `--rejudge`)."""
    group = parser.add_argument_group("judge")
    group.add_argument("--judge-model", action="append", default=None, metavar="NAME", required=required,
                       help="judge model name; repeat for a panel (label = majority, ties go to the first listed)")
    group.add_argument("--judge-base-url", action="append", default=None, metavar="URL",
                       help="OpenAI-compatible base URL of the judge (e.g. http://127.0.0.1:30000/v1); give once "
                            "for all judges or once per --judge-model, in the same order")
    group.add_argument("--judge-api-key-env", action="append", default=None, metavar="VAR",
                       help="env var holding the judge API key (default OPENAI_API_KEY); once, or once per judge")
    group.add_argument("--judge-max-tokens", type=judge_max_tokens, default=4096, metavar="N",
                       help=f"max tokens per judge reply, at least {MIN_JUDGE_MAX_TOKENS}; leave room for reasoning "
                            "judges (default 4096)")
    group.add_argument("--judge-temperature", type=non_negative_float, default=0.0, metavar="T", help="default 0")
    group.add_argument("--judge-timeout", type=positive_float, default=300.0, metavar="S",
                       help="per-request deadline in seconds (default 300)")
    group.add_argument("--judge-max-retries", type=non_negative_int, default=5, metavar="N",
                       help="HTTP retries per judge request (429/5xx/timeouts; default 5)")
    group.add_argument("--judge-reasks", type=non_negative_int, default=2, metavar="N",
                       help="re-ask a judge whose reply is not a valid verdict up to N times (default 2)")
    group.add_argument(*concurrency_flags, dest="judge_concurrency", type=positive_int, default=16, metavar="C",
                       help="judge requests in flight per judge (default 16)")
    group.add_argument("--judge-extra-body", type=json_object, default=None, metavar="JSON",
                       help='JSON object merged into each judge request, e.g. \'{"chat_template_kwargs": '
                            '{"enable_thinking": false}}\'')
    group.add_argument("--judge-prompt", default=None, metavar="FILE.md|judge_vN",
                       help="judge prompt: a file, or a packaged version by name (default judge_v2; judge_v1 is "
                            "kept for reproducing earlier verdicts)")
    group.add_argument("--judge-all", action="store_true",
                       help="also send records labelled by a pre-label rule (empty, restatement, role leak) to "
                            "the judges")
    if not resumable:
        return
    group.add_argument("--rejudge", action="store_true",
                       help="the file holds labels of another judge panel (other judge models or prompt): label "
                            "those records again with this panel instead of refusing")
