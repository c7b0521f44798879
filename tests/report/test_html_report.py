"""The HTML report: examples across items with counts, lists that say "20 of 72", a sample table with the exact
prompt on demand (equal to what a server received), inline SVG figures, and provenance."""

from __future__ import annotations

import html as htmllib
import importlib.metadata
import re
from pathlib import Path

import numpy as np
from mock_http import MockServer, completion_handler
from test_show_record import QWEN_DIR, probe, write_dataset

from userturn.cli import main
from userturn.core.jsonl import JsonlWriter, read_records
from userturn.core.records import JudgeVerdict, ProbeRecord, record_key
from userturn.report.html import examples_of, render_html, select_examples
from userturn.report.summary import summarise

JUDGE_SHA = "5f" * 32


def rec(item: str, sample: int, label: str | None, *, judge_error: bool = False) -> ProbeRecord:
    verdict = (JudgeVerdict(judge="judge-a", status="error", error="unparseable", raw="maybe?",
                            prompt_sha256=JUDGE_SHA) if judge_error else
               JudgeVerdict(judge="judge-a", status="ok", label=label, rationale=f"why {item}",
                            prompt_sha256=JUDGE_SHA))
    return ProbeRecord(
        key=record_key("m", "d", item, "none", 0.0, sample), model="m", dataset="d", item_id=item, temperature=0.0,
        sample=sample, seed=sample, status="ok", user_turn=f"turn {item}/{sample}",
        messages=[{"role": "user", "content": f"question {item}"}, {"role": "assistant", "content": "answer"}],
        label=None if judge_error else label, label_source=None if judge_error else "judge",
        judge_status="error" if judge_error else "ok", judges=[verdict],
        config_fingerprint="00aa11bb22cc33dd")


CONFIGS = {"00aa11bb22cc33dd": {"model": "m", "max_tokens": 64}}


def many() -> list[ProbeRecord]:
    """Item a0 alone has 40 generic records (it would fill every example slot if picked by key); 32 more generic
    records come from 16 other items; 30 records are judge failures."""
    out = [rec("a0", k, "generic") for k in range(40)]
    out += [rec(f"b{i:02d}", k, "generic") for i in range(16) for k in range(2)]
    out += [rec(f"c{i:02d}", 0, None, judge_error=True) for i in range(30)]
    out += [rec(f"g{i}", 0, "genuine_followup") for i in range(3)]
    return out


def test_examples_are_drawn_across_items_and_say_how_many_of_how_many():
    records = many()
    examples = examples_of(records)
    generic = examples.by_label["generic"]
    assert len(generic.records) == 5 and len({r.item_id for r in generic.records}) == 5
    assert generic.caption == "5 of 72 from 5 of 17 items"
    assert examples.by_label["genuine_followup"].caption == "3 of 3 from 3 of 3 items"
    assert examples.failures.caption == "20 of 30"
    page = render_html(summarise(records), [], examples, len(records), None, "r.jsonl")
    assert "<h3>generic: 5 of 72 from 5 of 17 items</h3>" in page
    assert "Judge failures (raw judge output kept): 20 of 30" in page
    assert "Records: 50 of 105" in page  # the sample table says how much it shows


def test_streaming_selection_equals_the_in_memory_one(tmp_path: Path):
    records = many()
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as writer:
        for r in records:
            writer.write(r)
    streamed = select_examples(path, np.ones(len(records), dtype=bool))
    loaded = examples_of(records)
    for label, shown in loaded.by_label.items():
        assert [r.key for r in streamed.by_label[label].records] == [r.key for r in shown.records]
        assert streamed.by_label[label].caption == shown.caption
    assert [r.key for r in streamed.table.records] == [r.key for r in loaded.table.records]
    assert streamed.failures.caption == loaded.failures.caption


def test_provenance_versions_fingerprints_judge_prompt_and_date():
    records = many()
    page = render_html(summarise(records, CONFIGS), [], examples_of(records), len(records), None, "r.jsonl")
    prov = page.split('<h2 id="provenance">', 1)[1]
    assert f"userturn {importlib.metadata.version('userturn')}" in prov
    assert f"numpy {importlib.metadata.version('numpy')}" in prov and "pydantic " in prov
    assert re.search(r"<th>generated</th><td>20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", prov)
    assert "<code>00aa11bb22cc33dd</code>" in prov and "&#34;max_tokens&#34;: 64" in prov
    assert f"judge-a:\n{JUDGE_SHA}" in prov  # the full sha256 of the judge prompt


def test_sample_table_prompts_equal_what_the_server_received_and_figures_are_inline_svg(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    with MockServer(completion_handler(lambda body: "Why?")) as server:
        probe(server, write_dataset(tmp_path / "d.jsonl"), out, "--tokenizer", QWEN_DIR)
        sent = {b["seed"]: b["prompt"] for b in server.bodies("/completions")}
    records, _ = read_records(out)
    report = tmp_path / "report.html"
    assert main(["report", str(out), "--html", str(report), "--tokenizer", QWEN_DIR]) == 0
    page = report.read_bytes().decode("utf-8")  # as written: a CRLF in a prompt stays a CRLF
    row = r"<tr><td>(mock\|[^<]+)</td>.*?<summary>prompt \(([^)]*)\)</summary>\n<pre class=\"prompt\">(.*?)</pre>"
    rows = re.findall(row, page, flags=re.S)
    assert len(rows) == len(records) == 8
    for key, note, prompt in rows:
        key = htmllib.unescape(key)
        assert note == "sha256 matches the record&#39;s prompt_sha256"
        assert htmllib.unescape(prompt) == sent[records[key].seed]
    assert "<svg" not in page and "data:image/png" not in page and "<script" not in page
    assert "Not drawn, nothing to show" in page and "labelled by rules only" not in page  # unjudged, no rule
    assert "none of the 8 records is labelled yet" in page
    recorded = tmp_path / "recorded.html"  # no tokenizer: rendered from the file's configuration lines
    assert main(["report", str(out), "--html", str(recorded)]) == 0
    assert recorded.read_text().count("sha256 matches the record&#39;s prompt_sha256") == 8
    old = tmp_path / "old.jsonl"  # a file from before configuration lines: the conversation, and how to get the prompt
    old.write_text("".join(line + "\n" for line in out.read_text().splitlines() if '"type":"config"' not in line))
    without = tmp_path / "plain.html"
    assert main(["report", str(old), "--html", str(without)]) == 0
    plain = without.read_text()
    assert "<summary>prompt (" not in plain and "prompt not rebuilt" in plain and "--tokenizer" in plain
