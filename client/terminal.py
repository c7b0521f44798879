"""The rich Console every table is printed on: an explicit width when the output is not a terminal."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from userturn.core.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_WIDTH = 100  # the width tables are designed for (and tested at) when nothing else says
WIDE_WIDTH = 300  # `--wide` into a file or pipe: every column on one line


def console(*, stderr: bool = False, wide: bool = False) -> Console:
    """A Console on stdout (or stderr). On a terminal it takes the terminal's width; otherwise $COLUMNS when set,
    else 100 columns (300 for `--wide` tables), never rich's 80-column fallback."""
    from rich.console import Console

    out = Console(stderr=stderr)
    if out.is_terminal:
        return out
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else WIDE_WIDTH if wide else DEFAULT_WIDTH
    return Console(stderr=stderr, width=width)


def print_trimmed(out: Console, renderable: object) -> None:
    """Print a renderable (a table; a str is read as rich markup) without the trailing spaces rich pads and wraps
    its lines with, so a report piped to a file or pasted into a paper carries none; styles are kept."""
    from rich.segment import Segment, Segments

    if isinstance(renderable, str):
        renderable = out.render_str(renderable)
    for line in out.render_lines(renderable, out.options, pad=False, new_lines=False):  # type: ignore[arg-type]
        segments = list(line)
        while segments and not segments[-1].control and not segments[-1].text.rstrip():
            segments.pop()
        if segments:
            last = segments[-1]
            segments[-1] = Segment(last.text.rstrip(), last.style, last.control)
        out.print(Segments([*segments, Segment.line()]), end="", crop=False, soft_wrap=True)


NAME_WIDTH = 24  # the widest the name column gets in the compact table; longer names wrap at their separators
BREAK_AFTER = re.compile(r"[^/\-_: ]+[/\-_: ]*|[/\-_: ]+")


def wrap_name(name: str, width: int = NAME_WIDTH) -> str:
    """A model or dataset name on lines of at most `width` characters, broken after a separator (`/`, `-`, `_`,
    `:`, space), never inside a word unless one word alone is longer than `width`."""
    lines: list[str] = []
    line = ""
    for part in BREAK_AFTER.findall(name):
        if line and len(line) + len(part.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        while len(part) > width:  # one word wider than the column: cut it, the only way it fits
            lines.append(part[:width])
            part = part[width:]
        line += part
    if line or not lines:
        lines.append(line.rstrip())
    return "\n".join(lines)


def matching(flag: str, patterns: Sequence[str], values: set[str]) -> set[str]:
    """The values some shell pattern of `patterns` matches (all of them when there is none); UserError naming
    `flag` and what is present when a pattern matches nothing."""
    if not patterns:
        return values
    out = set()
    for pattern in patterns:
        hits = {v for v in values if fnmatchcase(v, pattern)}
        if not hits:
            raise UserError(f"{flag} {pattern}: matches nothing in the results (present: "
                            f"{', '.join(sorted(values)) or 'none'})")
        out |= hits
    return out
