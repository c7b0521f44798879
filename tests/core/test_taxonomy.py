"""The label taxonomy: one list everywhere; `related_new_query` is a label of its own, counted in n and never as a
follow-up, from a judge's verdict through the report."""

from __future__ import annotations

import json

import httpx
import respx

from userturn.core.records import Message, ProbeRecord
from userturn.core.taxonomy import DESCRIPTIONS, FOLLOWUP, LABELS, SHORT, normalise_label
from userturn.judges.llm_judge import JudgeConfig
from userturn.judges.panel import JudgePanel, PanelConfig
from userturn.judges.parse import response_schema
from userturn.report.summary import summarise

JUDGE = "http://judge.test/v1"


def test_every_label_has_a_description_and_a_unique_short_name():
    assert "related_new_query" in LABELS and FOLLOWUP == "genuine_followup"
    assert set(DESCRIPTIONS) == set(SHORT) == set(LABELS)
    assert len(set(SHORT.values())) == len(LABELS) and SHORT["related_new_query"] == "RN"
    assert normalise_label("Related new query") == "related_new_query"
    assert response_schema()["json_schema"]["schema"]["properties"]["label"]["enum"] == list(LABELS)


def record(n: int) -> ProbeRecord:
    return ProbeRecord(key=f"m|d|q{n}|raw|none|t=0.0|s=0", model="m", dataset="d", item_id=f"q{n}", temperature=0.0,
                       sample=0, seed=0, status="ok", user_turn=f"turn {n}", messages=[
                           Message(role="user", content="What is the capital of Australia?"),
                           Message(role="assistant", content="Canberra, a compromise between Sydney and Melbourne.")])


async def test_a_judge_answering_related_new_query_is_counted_in_n_not_as_a_followup():
    """Four records: the judge says related_new_query for two, genuine_followup and unrelated_query for one each.
    By hand: n = 4, follow-ups = 1, rate = 1/4, labels RN 2 GF 1 UQ 1."""
    answers = {"turn 0": "related_new_query", "turn 1": "related_new_query", "turn 2": "genuine_followup",
               "turn 3": "unrelated_query"}

    def reply(request: httpx.Request) -> httpx.Response:
        content = json.loads(request.content)["messages"][-1]["content"]
        turn = content.split("<generated_user_turn>\n", 1)[1].split("\n", 1)[0]
        verdict = json.dumps({"rationale": "r", "label": answers[turn]})
        return httpx.Response(200, json={"choices": [{"message": {"content": verdict}, "finish_reason": "stop"}]})

    panel = JudgePanel(PanelConfig(judges=[JudgeConfig(model="j", base_url=JUDGE, max_retries=0, reasks=0)]))
    with respx.mock(using="httpx") as mock:
        mock.post(f"{JUDGE}/chat/completions").mock(side_effect=reply)
        try:
            judged = [await panel.judge(record(n)) for n in range(4)]
        finally:
            await panel.aclose()
    assert [r.label for r in judged] == list(answers.values())
    assert all(v.prompt_sha256 == panel.prompt.sha256 for r in judged for v in r.judges)
    [group] = summarise(judged)
    assert (group.n, group.followups, group.followup_rate) == (4, 1, 0.25)
    assert (group.labels["related_new_query"], group.labels["genuine_followup"]) == (2, 1)


def test_one_table_gives_every_label_every_attribute_and_distinct_colours():
    from matplotlib.colors import to_rgb

    from userturn.core.taxonomy import COLOURS, TAXONOMY, LabelInfo, is_followup

    assert tuple(info.name for info in TAXONOMY) == LABELS and len(TAXONOMY) == 8
    for info in TAXONOMY:
        assert all(getattr(info, field) not in (None, "") for field in LabelInfo._fields), info
        assert len(info.short) == 2 and info.short.isupper()
        to_rgb(info.colour)  # a colour matplotlib draws
    assert len({c.lower() for c in COLOURS.values()}) == len(LABELS)
    assert [info.name for info in TAXONOMY if info.followup] == [FOLLOWUP]
    assert is_followup("genuine_followup") and not is_followup("related_new_query") and not is_followup(None)


def test_the_docs_label_table_is_the_taxonomy():
    from pathlib import Path

    from userturn.core.taxonomy import TAXONOMY

    docs = (Path(__file__).resolve().parents[2] / "docs" / "judging.md").read_text(encoding="utf-8")
    for info in TAXONOMY:
        row = (f"| `{info.name}` | {info.short} | {info.description} | `{info.colour}` | "
               f"{'yes' if info.followup else 'no'} |")
        assert row in docs, row
