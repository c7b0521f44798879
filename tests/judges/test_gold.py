"""The gold-label file: appended answers, the last per (key, labeller) wins, undo and skip give no label."""

from __future__ import annotations

from pathlib import Path

import pytest

from userturn.core.errors import UserError
from userturn.judges.gold import GoldLine, append_gold, read_gold, read_gold_lines


def test_last_answer_per_key_and_labeller_wins(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    append_gold(path, GoldLine(key="k1", label="generic", labeller="ann"))
    append_gold(path, GoldLine(key="k1", label="genuine_followup", labeller="ann"))  # changed her mind
    append_gold(path, GoldLine(key="k1", label="empty", labeller="bob"))
    append_gold(path, GoldLine(key="k2", label="generic", labeller="ann"))
    append_gold(path, GoldLine(key="k2", label=None, labeller="ann"))  # undo
    append_gold(path, GoldLine(key="k3", labeller="ann", skipped=True))
    answers = read_gold([path])
    assert {pair: line.label for pair, line in answers.items()} == {
        ("k1", "ann"): "genuine_followup", ("k1", "bob"): "empty"}
    assert len(read_gold_lines(path)) == 6


def test_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    append_gold(path, GoldLine(key="k1", label="generic", labeller="ann"))
    with path.open("a") as handle:
        handle.write('{"key": "k2", "label": "not_a_label", "labeller": "ann"}\n')
    with pytest.raises(UserError, match=r"gold\.jsonl:2: not a gold label line"):
        read_gold([path])
