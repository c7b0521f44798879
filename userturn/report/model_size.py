"""Models in order of size for the report's tables and figures, the size parsed from the name: `Qwen3.5-0.8B` ->
0.8e9, `Qwen3.5-122B-A10B` -> 122e9 (the total), `SmolLM2-135M` -> 135e6, `Mixtral-8x7B` -> 56e9.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from userturn.core.errors import UserError

UNITS = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
# A number directly followed by a unit and then a separator or the end, not a letter (so `qwen3` is no size and
# `v2` neither); `8x7b` reads 8 x 7b (experts x expert size).
SIZE = re.compile(r"(?<![a-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([kmbt])(?![a-z])", re.IGNORECASE)


def parameter_count(name: str) -> float | None:
    """The parameter count a model name states (the first number with a unit, after any `org/`), else None."""
    match = SIZE.search(name.rsplit("/", 1)[-1].replace("_", "-"))
    if match is None:
        return None
    experts = int(match.group(1)) if match.group(1) else 1
    return experts * float(match.group(2)) * UNITS[match.group(3).lower()]


def parse_model_order(text: str) -> list[str]:
    """`--model-order a,b,c`: the names, stripped, in order (argparse type; empty names are a usage error)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ValueError("a comma-separated list of model names, none empty")
    return names


def order_models(models: Iterable[str], override: Sequence[str] | None = None) -> list[str]:
    """Distinct models: those named in `override` first, in its order, then the others by parameter count (parsed
    from the name), then those without one, by name. A name in `override` that is not a model is a UserError."""
    present = sorted(set(models))
    first = list(dict.fromkeys(override or ()))
    missing = [name for name in first if name not in present]
    if missing:
        raise UserError(f"--model-order: no model named {', '.join(missing)} in the results (present: "
                        f"{', '.join(present) or 'none'})")
    rest = [m for m in present if m not in first]
    rest.sort(key=lambda m: (parameter_count(m) is None, parameter_count(m) or 0.0, m))
    return first + rest
