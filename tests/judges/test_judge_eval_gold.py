"""`judge-eval` on the answers `userturn label` writes (judges/gold.py), and `--repeat`: the judge against itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from judge_process import FIXTURES, JudgeServer

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.judges.evaluate import load_gold, self_agreement
from userturn.judges.gold import GoldLine, append_gold


def answers_file(tmp_path: Path) -> Path:
    """gold_small.jsonl's 8 items as labellers' answers: ann labels all 8 as gold says; bob agrees on g1 and
    disagrees on g3 (a tie: g3 is left out); ann took back an answer on g2 and gave it again (last line wins)."""
    path = tmp_path / "gold.jsonl"
    lines = [json.loads(line) for line in (FIXTURES / "gold_small.jsonl").read_text().splitlines()]
    for obj in lines:
        messages = obj.get("messages") or [{"role": "user", "content": obj["query"]},
                                           {"role": "assistant", "content": obj["response"]}]
        if obj["id"] == "g2":
            append_gold(path, GoldLine(key=obj["id"], label="generic", labeller="ann", user_turn=obj["user_turn"],
                                       messages=messages))
            append_gold(path, GoldLine(key=obj["id"], label=None, labeller="ann"))  # undo
        append_gold(path, GoldLine(key=obj["id"], label=obj["label"], labeller="ann", user_turn=obj["user_turn"],
                                   messages=messages))
    append_gold(path, GoldLine(key="g1", label="genuine_followup", labeller="bob"))
    append_gold(path, GoldLine(key="g3", label="genuine_followup", labeller="bob"))
    return path


def test_answers_become_one_gold_item_per_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = load_gold(answers_file(tmp_path))
    assert [i.id for i in items] == ["g1", "g2", "g4", "g5", "g6", "g7", "g8"]  # g3 tied
    assert {i.id: i.label for i in items}["g2"] == "genuine_followup"
    assert "1 gold keys" in capsys.readouterr().err
    bare = tmp_path / "bare.jsonl"
    append_gold(bare, GoldLine(key="k", label="generic", labeller="ann"))
    with pytest.raises(UserError, match="no `user_turn` and `messages`"):
        load_gold(bare)


def test_self_agreement_by_hand() -> None:
    """Pass 1: GF, GE, GE, UQ; pass 2: GF, GE, UQ, UQ. Same label on 3 of 4. Chance: GF 1/4 * 1/4 + GE 2/4 * 1/4 +
    UQ 1/4 * 2/4 = 5/16; kappa = (12/16 - 5/16) / (11/16) = 7/11. The item a pass failed on (None) is left out."""
    a = ["genuine_followup", "generic", "generic", "unrelated_query", "generic"]
    b = ["genuine_followup", "generic", "unrelated_query", "unrelated_query", None]
    same = self_agreement([a, b])
    assert (same.repeats, same.items, same.agreement) == (2, 4, 0.75)
    assert same.kappa == pytest.approx(7 / 11)


@pytest.mark.slow
def test_judge_eval_repeat_against_a_real_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = JudgeServer()
    try:
        code = main(["judge-eval", str(answers_file(tmp_path)), "--judge-base-url", server.base_url,
                     "--judge-model", "keyword-judge", "--repeat", "2", "--json"])
        assert code == 0
        [score] = json.loads(capsys.readouterr().out)
        assert (score["items"], score["scored"]) == (7, 7)
        assert score["self_agreement"] == {"repeats": 2, "items": 7, "agreement": 1.0, "kappa": 1.0}
        assert server.stats()["requests"] == 14  # every item judged twice
    finally:
        server.stop()
