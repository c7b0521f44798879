"""The numeric final answer of an MT-Bench math reference, where it has one (the item's `answer`).

The rule reads the first line only: it starts with a number followed by nothing, `%`, or a space and a word
(`12000`, `38 people`), or it ends with "is N" or "= N" (`Area is 3`, `f(2) = 0`). Anything else (`35/36`, an
expression) has none. The number is returned as written, less thousands separators.
"""

from __future__ import annotations

import re

_NUMBER = r"(?P<number>-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
LEADING = re.compile(rf"^\s*\$?{_NUMBER}\s*%?(?:\s+[A-Za-z].*)?$")
TRAILING = re.compile(rf"(?:\bis|=)\s*\$?{_NUMBER}\s*%?\s*\.?\s*$")


def reference_number(reference: str) -> str | None:
    """The numeric final answer of a reference text by the module's rule, or None."""
    lines = reference.strip().splitlines()
    first = lines[0] if lines else ""
    match = LEADING.match(first) or TRAILING.search(first)
    return match.group("number").replace(",", "") if match else None


__all__ = ["reference_number"]
