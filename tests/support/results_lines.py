"""Test helper: the lines of a results file as dicts, records and configuration lines apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def all_lines(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


def record_lines(path: str | Path) -> list[dict[str, Any]]:
    """The record lines, in file order (configuration lines left out)."""
    return [x for x in all_lines(path) if x.get("type") != "config"]


def config_lines(path: str | Path) -> list[dict[str, Any]]:
    """The configuration lines (`records.ConfigLine`), in file order."""
    return [x for x in all_lines(path) if x.get("type") == "config"]
