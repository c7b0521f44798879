"""argparse types for every command's flags: a bad value is a usage error (exit 2) naming the flag, never a silent
clamp. `parser.add_argument("--samples", type=positive_int)` reports `argument --samples: must be at least 1, got 0`.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any


def _bounded(kind: type[int] | type[float], ok: Callable[[Any], bool], must: str) -> Callable[[str], Any]:
    """A finite `kind` type whose values pass `ok`; the message says what the value `must` be."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if kind is float and not math.isfinite(value):  # an int is finite (a huge one overflows isfinite)
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {must}, got {text}")
        return value
    return parse


def at_least(minimum: int, why: str = "") -> Callable[[str], int]:
    """An integer type with a lower bound; `why` is added to the message."""
    return _bounded(int, lambda value: value >= minimum, f"at least {minimum}{why}")


positive_int = at_least(1)
non_negative_int: Callable[[str], int] = _bounded(int, lambda value: value >= 0, "0 or more")
positive_float: Callable[[str], float] = _bounded(float, lambda value: value > 0, "positive")
non_negative_float: Callable[[str], float] = _bounded(float, lambda value: value >= 0, "0 or more")
probability: Callable[[str], float] = _bounded(float, lambda value: 0 < value <= 1, "above 0 and at most 1")  # top_p
unit_interval: Callable[[str], float] = _bounded(float, lambda value: 0 <= value <= 1, "0 to 1")  # min_p


def bounded(kind: type[int] | type[float], *, ge: float | None = None, gt: float | None = None,
            le: float | None = None) -> Callable[[str], Any]:
    """The type of a value with these bounds (an option's annotation: `cli.option_flags`), worded as above."""
    def ok(value: Any) -> bool:
        return (ge is None or value >= ge) and (gt is None or value > gt) and (le is None or value <= le)

    lower = (f"{ge:g} or more" if ge == 0 else f"at least {ge:g}") if ge is not None else \
        ("positive" if gt == 0 else f"above {gt:g}") if gt is not None else None
    if le is not None:
        must = f"{ge:g} to {le:g}" if ge is not None else f"above {gt:g} and at most {le:g}" if gt is not None \
            else f"at most {le:g}"
    else:
        must = lower or "a number"
    return _bounded(kind, ok, must)


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value
