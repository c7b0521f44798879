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


def positive_float(text: str) -> float:
    value: float = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value: float = _number(text, float)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def probability(text: str) -> float:
    """A number in (0, 1], e.g. top_p."""
    value: float = _number(text, float)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text}")
    return value


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value
