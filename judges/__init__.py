"""Judges: label generated user turns (rules, then judge models), measure agreement, and report.

Public API: `JudgePanel` (await panel.judge(record) -> labelled copy), `PanelConfig`, `JudgeConfig`,
`JudgeCounters`, `make_panel(config)` (the flags become a `PanelConfig` in `userturn.cli.judge_arguments`).
Loaded on first use, so building the CLI parser stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "JudgeConfig": "userturn.judges.llm_judge",
    "JudgeCounters": "userturn.judges.panel",
    "JudgePanel": "userturn.judges.panel",
    "PanelConfig": "userturn.judges.panel",
    "make_panel": "userturn.judges.panel",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'judges' has no attribute {name!r}")
