"""Modules a newcomer reads in one sitting (issue 27): no source module over 450 lines, no class over 300."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 300
SOURCES = sorted(p for folder in ("userturn", "client", "serve", "judges") for p in (ROOT / folder).rglob("*.py"))


def long_classes(source: str) -> list[tuple[str, int]]:
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_module_fits_in_one_sitting(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = len(source.splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_MODULE_LINES})"
    assert not long_classes(source), f"{path.relative_to(ROOT)}: classes over {MAX_CLASS_LINES} lines: " \
                                     f"{long_classes(source)}"


def test_the_limits_are_seen() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    assert long_classes(f"class Big:\n{body}\n") == [("Big", MAX_CLASS_LINES + 1)]
    assert long_classes("class Small:\n    pass\n") == []
    assert len(SOURCES) > 100
