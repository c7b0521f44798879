"""The one reader of results files (userturn.core.results_reader) and its views: on one varied file (two
configurations, a configuration line in another key order, a superseded line, judged and unjudged records, errors,
a torn tail) every view reads the same lines as before, pinned here as fixed values."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import orjson
import pytest

from userturn.cli import main
from userturn.core import resume_index
from userturn.core.jsonl import compact, read_records
from userturn.core.records import ConfigLine, JudgeVerdict, ProbeRecord, record_key

A, B = "a" * 16, "b" * 16


def record(item: str, *, fp: str, perturbation: str = "none", status: str = "ok", label: str | None = None,
           sample: int = 0, correct: bool | None = None, turn: str = "What next?") -> ProbeRecord:
    key = record_key("m/model-7b", "gsm8k", item, perturbation, 0.7, sample)
    judged = label is not None
    return ProbeRecord(
        key=key, status=status, judge_status="ok" if judged else None, config_fingerprint=fp, model="m/model-7b",
        dataset="gsm8k", item_id=item, perturbation=perturbation, temperature=0.7, sample=sample, seed=sample,
        messages=[{"role": "user", "content": f"question {item}"}, {"role": "assistant", "content": "answer 4"}],
        user_turn=turn if status == "ok" else None, error=None if status == "ok" else "HTTP 500",
        finish_reason="stop" if status == "ok" else None, correct=correct, label=label,
        label_source="judge" if judged else None,
        judges=[JudgeVerdict(judge="j/judge-70b", status="ok", label=label)] if judged else [],
        usage={"prompt_tokens": 10, "completion_tokens": 3} if status == "ok" else None)


def line(r: ProbeRecord) -> bytes:
    return r.model_dump_json().encode() + b"\n"


@pytest.fixture
def varied(tmp_path: Path) -> Path:
    path = tmp_path / "results.jsonl"
    lines = [
        ConfigLine(fingerprint=A, config={"model": "m/model-7b", "max_tokens": 64}).model_dump_json().encode() + b"\n",
        line(record("1", fp=A, label="genuine_followup", correct=True)),
        line(record("1", fp=A, perturbation="generic", label="generic", correct=False)),
        line(record("2", fp=A, label="restates_query", correct=True)),  # superseded below (re-judged)
        line(record("2", fp=A, perturbation="generic", status="error")),
        line(record("3", fp=A)),  # unjudged
        b"\n",
        # configuration line as `jq -S` writes it: another key order and spacing
        json.dumps({"type": "config", "fingerprint": B, "config": {"max_tokens": 128, "model": "m/model-7b"}},
                   sort_keys=True).encode() + b"\n",
        line(record("1", fp=B, perturbation="swap", label="empty", correct=False)),
        line(record("2", fp=B, perturbation="swap", status="error")),
        line(record("2", fp=A, label="genuine_followup", correct=True, turn="And then?")),  # supersedes line 4
        line(record("3", fp=B, label="genuine_followup", sample=1)),
        line(record("2", fp=B, perturbation="generic", label="meta_commentary")),  # line 5's error, rerun with B
        line(record("4", fp=A, label="genuine_followup"))[:70],  # torn tail: a write cut by a kill
    ]
    path.write_bytes(b"".join(lines))
    return path


KEY = "m/model-7b|gsm8k|{}|raw|{}|t=0.7|s={}"
OK_KEYS = {KEY.format("1", "none", 0), KEY.format("1", "generic", 0), KEY.format("2", "none", 0),
           KEY.format("2", "generic", 0), KEY.format("3", "none", 0), KEY.format("3", "none", 1),
           KEY.format("1", "swap", 0)}


@pytest.mark.parametrize("careful_tail", [resume_index.CAREFUL_TAIL_BYTES, 0])
def test_resume_reads_the_keys_whose_last_line_is_ok(varied: Path, careful_tail: int, monkeypatch) -> None:
    monkeypatch.setattr(resume_index, "CAREFUL_TAIL_BYTES", careful_tail)  # 0: the regex fast path on every line
    index = resume_index.scan_results(varied)
    assert index.ok == OK_KEYS
    assert (index.lines, index.torn_tail, sorted(index.configs), sorted(index.ok_fingerprints)) == (10, True, [A, B],
                                                                                                    [A, B])


def test_read_records_and_compact_keep_the_current_line_per_key_and_configuration(varied: Path) -> None:
    records, report = read_records(varied)
    assert {k: (r.config_fingerprint, r.label) for k, r in records.items()} == {
        KEY.format("1", "none", 0): (A, "genuine_followup"), KEY.format("1", "generic", 0): (A, "generic"),
        KEY.format("2", "none", 0): (A, "genuine_followup"), KEY.format("2", "generic", 0): (B, "meta_commentary"),
        KEY.format("3", "none", 0): (A, None), KEY.format("1", "swap", 0): (B, "empty"),
        KEY.format("2", "swap", 0): (B, None), KEY.format("3", "none", 1): (B, "genuine_followup")}
    assert (report.lines, report.duplicates, report.torn_tail, sorted(report.configs)) == (10, 2, True, [A, B])
    done = compact(varied)
    assert (done.records, done.kept, done.configs, done.torn_tail) == (10, 9, 2, True)
    kept = [orjson.loads(x) for x in varied.read_bytes().splitlines()]
    assert [(x.get("type"), x.get("item_id"), x.get("label")) for x in kept] == [
        ("config", None, None), (None, "1", "genuine_followup"), (None, "1", "generic"), (None, "2", None),
        (None, "3", None), ("config", None, None), (None, "1", "empty"), (None, "2", None),
        (None, "2", "genuine_followup"), (None, "3", "genuine_followup"), (None, "2", "meta_commentary")]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_report_json_show_and_export_read_the_same_lines(varied: Path, capsys) -> None:
    assert main(["report", str(varied), "--json"]) == 0
    report = capsys.readouterr().out
    rows = json.loads(report)
    assert [(r["config_fingerprint"], r["perturbation"], r["n"]) for r in rows] == [
        (B, "none", 1), (A, "none", 2), (B, "generic", 1), (A, "generic", 1), (B, "swap", 1)]
    assert digest(report) == "ae756f23a9d707e6"  # + the calibration fields, null without gold
    assert main(["export", str(varied), "--format", "sft"]) == 0
    exported = [json.loads(x) for x in capsys.readouterr().out.splitlines()]  # the current genuine follow-ups
    assert [(r["key"], r["messages"][-1]["content"]) for r in exported] == [
        (KEY.format("1", "none", 0), "What next?"), (KEY.format("2", "none", 0), "And then?"),
        (KEY.format("3", "none", 1), "What next?")]
    assert main(["show", str(varied)]) == 0
    shown = capsys.readouterr()
    assert digest("\n".join(shown.out.splitlines()[1:])) == "7ad59c667ef3c317"  # the title names the temporary file
    assert shown.err == f"userturn: {varied}: ignored a torn final line\n"
    assert main(["show", str(varied), KEY.format("2", "none", 0)[:30]]) == 2  # the short key finds the current line
    assert "record 'm/model-7b|gsm8k|2|raw|none|t=0.7|s=0' is a raw-mode record" in capsys.readouterr().err


def test_a_malformed_line_is_named_by_file_and_line(varied: Path, capsys) -> None:
    lines = varied.read_bytes().splitlines(keepends=True)
    lines[3] = b'{"schema_version": 3, "key": 5}\n'
    varied.write_bytes(b"".join(lines))
    for argv in (["report", str(varied), "--json"], ["export", str(varied), "--format", "sft"]):
        assert main(argv) == 2
        assert f"{varied}:4: not a userturn record" in capsys.readouterr().err
    with pytest.raises(Exception, match=f"{varied}:4: not a userturn record"):
        resume_index.scan_results(varied)


def test_the_judge_backlog_reads_the_current_line_of_each_key(varied: Path) -> None:
    from userturn.judges.backlog import scan_judging

    scan = scan_judging(varied, lambda facts: "todo")
    assert len(scan.todo) == 8
    assert [(r.item_id, r.perturbation, r.config_fingerprint, r.label) for r in scan.records()] == [
        ("1", "none", A, "genuine_followup"), ("1", "generic", A, "generic"), ("3", "none", A, None),
        ("1", "swap", B, "empty"), ("2", "swap", B, None), ("2", "none", A, "genuine_followup"),
        ("3", "none", B, "genuine_followup"), ("2", "generic", B, "meta_commentary")]


def test_one_module_decides_what_a_results_line_is() -> None:
    """Line splitting, configuration lines and the superseding rule are defined in results_reader only."""
    import ast

    root = Path(__file__).resolve().parents[2]
    owned = {"iter_lines", "read_lines", "is_config_line", "config_line", "_is_config", "legacy_config",
             "last_of_each", "keep_last"}
    defined: dict[str, list[str]] = {}
    for folder in ("userturn", "client", "judges"):
        for source in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.FunctionDef) and node.name in owned:
                    defined.setdefault(node.name, []).append(str(source.relative_to(root)))
    assert "iter_lines" not in defined  # one line splitter: read_lines
    assert all(where == ["userturn/core/results_reader.py"] for where in defined.values()), defined


def test_the_report_checks_what_it_reads_against_the_record_model(varied: Path, capsys) -> None:
    """Every field the report reads is checked by the record model's own types (a judge's prompt_sha256 included:
    it tells panels apart), so a line the record model refuses is refused by the report too, naming file:line."""
    lines = varied.read_bytes().splitlines(keepends=True)
    bad = orjson.loads(lines[1])
    bad["judges"][0]["prompt_sha256"] = 12
    lines[1] = orjson.dumps(bad) + b"\n"
    varied.write_bytes(b"".join(lines))
    assert main(["report", str(varied), "--json"]) == 2
    assert f"{varied}:2: not a userturn record (judges.0.prompt_sha256: Input should be a valid string)" in \
        capsys.readouterr().err
    with pytest.raises(Exception, match=f"{varied}:2: not a userturn record"):
        read_records(varied)


def test_current_and_last_of_each_keep_the_same_lines() -> None:
    """The superseding rule on a dict (`Current`) and on a column (`last_of_each`) agree line for line."""
    import numpy as np

    from userturn.core.results_reader import Current, last_of_each

    identities = [("k1", A), ("k2", A), ("k1", B), ("k1", A), ("k3", None), ("k2", A), ("k1", B)]
    current: Current[int] = Current()
    for number, identity in enumerate(identities):
        current.put(identity, number)
    keep = last_of_each(np.array([hash(i) for i in identities], dtype=np.int64))
    assert sorted(current.lines.values()) == np.flatnonzero(keep).tolist() == [3, 4, 5, 6]
    assert current.superseded == 3
