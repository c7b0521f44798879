"""Judges: label generated user turns (rules, then judge models), measure agreement, and report.

Public API: `JudgePanel` (await panel.judge(record) -> labelled copy), `PanelConfig`, `JudgeConfig`,
`JudgeCounters`, `add_judge_arguments(parser)`, `panel_from_args(args)`.
"""

from judges.llm_judge import JudgeConfig
from judges.panel import JudgeCounters, JudgePanel, PanelConfig, add_judge_arguments, panel_from_args

__all__ = ["JudgeConfig", "JudgeCounters", "JudgePanel", "PanelConfig", "add_judge_arguments", "panel_from_args"]
