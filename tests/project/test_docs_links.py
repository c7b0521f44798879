"""Every relative link in README.md and docs/*.md names a file that exists, and an anchor its headings make."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^()\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    found: set[str] = set()
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        name, n = slug, 0
        while name in found:
            n += 1
            name = f"{slug}-{n}"
        found.add(name)
    return found


def test_anchors_follow_githubs_rule():
    headings = "## Record schema\n## `userturn probe`\n## Task accuracy (`client/probe/scoring.py`)\n## A\n## A\n"
    assert anchors(headings) == {"record-schema", "userturn-probe", "task-accuracy-clientprobescoringpy", "a", "a-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        missing_anchor = (file.exists() and bool(anchor) and file.suffix == ".md"
                          and anchor not in anchors(file.read_text(encoding="utf-8")))
        if not file.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"
