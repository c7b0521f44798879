"""argparse types for every command's flags: a bad value is a usage error (exit 2) naming the flag, never a silent
clamp. `parser.add_argument("--samples", type=positive_int)` reports `argument --samples: must be at least 1, got 0`.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any


def _number(text: str, kind: type[int] | type[float]) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def at_least(minimum: int, why: str = "") -> Callable[[str], int]:
    """An integer type with a lower bound; `why` is added to the message."""
    def parse(text: str) -> int:
        value: int = _number(text, int)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}{why}, got {value}")
        return value
    parse.__name__ = f"at_least_{minimum}"
    return parse


positive_int = at_least(1)


def non_negative_int(text: str) -> int:
    value: int = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _float_type(ok: Callable[[float], bool], must: str) -> Callable[[str], float]:
    """A finite-number type whose values pass `ok`; the message says what the value `must` be."""
    def parse(text: str) -> float:
        value: float = _number(text, float)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {must}, got {text}")
        return value
    return parse


positive_float = _float_type(lambda value: value > 0, "positive")
non_negative_float = _float_type(lambda value: value >= 0, "0 or more")
probability = _float_type(lambda value: 0 < value <= 1, "above 0 and at most 1")  # e.g. top_p


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value
