"""`userturn judge` plans a resume from each line's few fields (`judges.backlog.record_heads`), never a record per
line: a million-line input reaches its first request in seconds. Whole records are parsed only when read back to
be judged, and a line that is no record is still named by file:line with the way out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from record_factory import line_of, make_record

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord
from userturn.core.text import digest
from userturn.judges.backlog import read_record, scan_judging
from userturn.judges.run_judge import CARRY, JUDGE, SKIP, plan_input


def test_planning_a_resume_parses_no_record(tmp_path: Path, monkeypatch) -> None:
    results, judged = tmp_path / "r.jsonl", tmp_path / "r.judged.jsonl"
    records = [make_record(i, user_turn=f"turn {i}") for i in range(40)]
    records[5] = make_record(5, status="error", user_turn=None, error="boom")
    results.write_bytes(b"".join(line_of(r) for r in records))
    labelled = [r.model_copy(update={"label": "genuine_followup", "label_source": "judge"}) for r in records[:30]]
    labelled[3] = labelled[3].model_copy(update={"user_turn": "another turn"})  # regenerated since: judge it again
    judged.write_bytes(b"".join(line_of(r) for r in labelled))
    parsed: list[bytes] = []
    original = ProbeRecord.model_validate_json
    monkeypatch.setattr(ProbeRecord, "model_validate_json",
                        classmethod(lambda cls, raw, **kw: parsed.append(raw) or original(raw, **kw)))
    output = scan_judging(judged, lambda facts: "done" if facts.status == "ok" else "no_generation", keep_done=True)
    plan = plan_input(results, output)
    assert parsed == []  # 70 lines read, no record built
    actions = {key: packed & 3 for key, packed in plan.entries.items()}
    assert actions[digest(records[0].key)] == SKIP and actions[digest(records[3].key)] == JUDGE
    assert actions[digest(records[5].key)] in (SKIP, CARRY) and actions[digest(records[35].key)] == JUDGE
    assert (plan.todo, plan.skipped) == (11, 29)


def test_a_line_that_is_no_record_is_named_by_its_line_when_read_back(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    bad = make_record(2).model_dump(mode="json")
    bad["seed"] = "not a number"  # JSON, key and status fine: only the whole record says no
    results.write_bytes(line_of(make_record(1)) + json.dumps(bad).encode() + b"\n" + line_of(make_record(3)))
    plan = plan_input(results, scan_judging(tmp_path / "none.jsonl", lambda facts: "todo"))
    offset = plan.entries[digest(bad["key"])] >> 2
    with results.open("rb") as fh, pytest.raises(UserError, match=rf"^{results}:2: not a userturn record \(seed: .*"
                                                               rf"delete it \(e\.g\. sed -i '2d'"):
        read_record(fh, results, offset)
