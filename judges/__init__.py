"""Judges: label generated user turns (rules, then judge models), measure agreement, and report. The public names
(`JudgePanel`, `PanelConfig`, `JudgeConfig`, `make_panel`) are exported by `userturn` itself."""
