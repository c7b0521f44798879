"""The HTML report shows the dataset's human next turn (MT-Bench's second turn) beside the generated one."""

from __future__ import annotations

from userturn.core.records import JudgeVerdict, ProbeRecord, record_key
from userturn.report.html import examples_of, render_html
from userturn.report.summary import summarise

CONVO = [{"role": "user", "content": "Area of the triangle (0,0), (-1,1), (3,3)?"},
         {"role": "assistant", "content": "The area is 3."}]


def record(item: str, turn: str, meta: dict | None) -> ProbeRecord:
    return ProbeRecord(
        key=record_key("m", "mt-bench", item, "none", 0.0, 0), model="m", dataset="mt-bench", item_id=item,
        temperature=0.0, sample=0, seed=0, messages=CONVO, status="ok", user_turn=turn, label="restates_query",
        label_source="rule", judge_status="ok", meta=meta,
        judges=[JudgeVerdict(judge="rule:restate", source="rule", status="ok", label="restates_query")],
    )


def test_human_next_turn_column_beside_the_generated_turn():
    records = [record("111", "Area of the triangle?", {"second_turn": "What's the area of the <circle>?"})]
    html = render_html(summarise(records), [], examples_of(records), len(records), None, "r.jsonl")
    assert "<th title=\"the human-written next turn the dataset carries (meta.second_turn)\">human next turn" in html
    row = html.split("<td>m|mt-bench|111", 1)[1].split("</tr>", 1)[0]
    generated, human = row.index("Area of the triangle?"), row.index("What&#39;s the area of the &lt;circle&gt;?")
    assert generated < human  # escaped, and right after the generated turn


def test_no_column_when_no_record_has_one():
    records = [record("1", "hello", None)]
    html = render_html(summarise(records), [], examples_of(records), len(records), None, "r.jsonl")
    assert "human next turn" not in html
