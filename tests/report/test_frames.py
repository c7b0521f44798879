"""`userturn.records_df` and `userturn.rows_df`: the results files of a notebook as pandas data frames, one row per
current record, and the report's rows with the numbers of `userturn report --json`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from judged_grid import write_grid

import userturn
from userturn.cli import main
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ConfigLine, JudgeVerdict, ProbeRecord, Usage, record_key
from userturn.report.frames import RECORD_COLUMNS


def record(item: str, sample: int, label: str | None, **more: Any) -> ProbeRecord:
    return ProbeRecord(key=record_key("m", "d", item, "none", 1.0, sample), status="ok", model="m", dataset="d",
                       item_id=item, temperature=1.0, sample=sample, seed=sample, config_fingerprint="fp",
                       messages=[{"role": "user", "content": f"What is {item}?"},
                                 {"role": "assistant", "content": f"{item} is 4."}],
                       user_turn=f"Why 4 for {item}?", label=label, **more)


def test_records_df_has_one_row_per_current_record(tmp_path: Path) -> None:
    """Five lines of records and a configuration line; two lines superseded (a re-judge appended later, an error
    record retried): three records, each with its last line's values."""
    path = tmp_path / "results.jsonl"
    with JsonlWriter(path) as writer:
        writer.write_config(ConfigLine(fingerprint="fp", config={"max_tokens": 32}))
        writer.write(record("a", 0, None, judge_status="error",
                            judges=[JudgeVerdict(judge="j", status="error", error="timeout")]))
        writer.write(record("a", 1, "generic", usage=Usage(prompt_tokens=10, completion_tokens=3, total_tokens=13)))
        writer.write(record("b", 0, None).model_copy(update={"status": "error", "user_turn": None, "error": "500"}))
        writer.write(record("a", 0, "genuine_followup", judge_status="ok", correct=True,
                            judges=[JudgeVerdict(judge="j", status="ok", label="genuine_followup")]))
        writer.write(record("b", 0, None, correct=False))
    assert len(path.read_text().splitlines()) == 6
    df = userturn.records_df(path)
    assert list(df.columns) == list(RECORD_COLUMNS)
    assert len(df) == 3 and df.key.is_unique
    rows = {(r.item_id, r.sample): r for r in df.itertuples()}
    a0, a1, b0 = rows["a", 0], rows["a", 1], rows["b", 0]
    assert (a0.label, a0.genuine_followup, a0.judge_status, a0.judges, a0.judge_errors) == (
        "genuine_followup", True, "ok", ["j"], [])
    assert (a1.label, a1.genuine_followup, a1.prompt_tokens, a1.total_tokens) == ("generic", False, 10, 13)
    assert (b0.status, b0.user_turn, b0.correct) == ("ok", "Why 4 for b?", False)
    assert pd.isna(b0.label) and pd.isna(b0.genuine_followup)  # unlabelled: missing, not False
    assert (a0.query, a0.assistant, a0.temperature, a0.perturbation) == ("What is a?", "a is 4.", 1.0, "none")
    assert str(df.genuine_followup.dtype) == "boolean" and str(df.prompt_tokens.dtype) == "Int64"


def close(a: Any, b: Any) -> bool:
    if isinstance(b, float) and isinstance(a, float):
        return math.isclose(a, b, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def test_rows_df_equals_report_json_on_a_multi_model_multi_dataset_file(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    judged = write_grid(tmp_path / "grid.jsonl")
    capsys.readouterr()
    assert main(["report", str(judged), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    df = userturn.rows_df(judged)
    assert len(df) == len(report) == 16 and list(df.columns) == list(report[0])
    for mine, row in zip(df.to_dict("records"), report, strict=True):
        for field, value in row.items():
            got = mine[field]
            if value is None:
                assert got is None or (isinstance(got, float) and math.isnan(got)), field
            else:
                assert close(float(got) if isinstance(value, float) else got, value), (field, got, value)
    # per model and dataset, not pooled: the rates differ between the models' rows
    gsm = df[(df.dataset == "gsm8k") & (df.perturbation == "none") & (df.temperature == 1.0)]
    assert set(gsm.model) == {"model-a", "model-b"} and gsm.followup_rate.nunique() == 2
    # the records behind the rows: records_df counts what the report counts
    records = userturn.records_df(judged)
    labelled = records[records.label.notna()]
    assert len(labelled) == df.n.sum() and int(labelled.genuine_followup.sum()) == df.followups.sum()


def test_a_missing_pandas_is_one_line(tmp_path: Path) -> None:
    judged = write_grid(tmp_path / "grid.jsonl", items=1, samples=1)
    code = ("import sys; sys.modules['pandas'] = None\n"
            "import userturn\n"
            "try:\n    userturn.rows_df(sys.argv[1])\n"
            "except userturn.UserError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(judged)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "records_df and rows_df need pandas: pip install 'userturn[cpu]' (or pandas)"
