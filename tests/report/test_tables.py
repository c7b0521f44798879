"""Every results table fits 100 columns with every cell whole: no `…`, no line over 100, numbers unbroken, long
model names wrapped (all their characters still printed); `--wide` has every column; token usage totals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from userturn.cli import main
from userturn.client.terminal import wrap_name
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord

LONG_MODEL = "Qwen/Qwen3.5-397B-A17B-Instruct-FP8-some-very-long-checkpoint-name"
LONG_DATASET = "mt-bench:reference-with-a-long-split-name"
LABELS = ["genuine_followup", "restates_query", "generic", "genuine_followup"]


def record(model: str, dataset: str, item: int, perturbation: str, t: float, sample: int, **kw) -> ProbeRecord:
    label = LABELS[(item + sample) % len(LABELS)]
    fields: dict = {
        "key": f"{model}|{dataset}|i{item}|raw|{perturbation}|t={t:g}|s={sample}", "model": model,
        "dataset": dataset, "item_id": f"i{item}", "perturbation": perturbation, "temperature": t, "sample": sample,
        "seed": 0, "status": "ok", "user_turn": "u", "label": label, "label_source": "judge", "judge_status": "ok",
        "correct": item % 3 != 0, "usage": {"prompt_tokens": 1200 + item, "completion_tokens": 40},
        "judges": [{"judge": "judge-a", "source": "judge", "status": "ok", "label": label}],
    }
    fields.update(kw)
    return ProbeRecord(**fields)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "results.jsonl"
    with JsonlWriter(path) as writer:
        for model in (LONG_MODEL, "tiny"):
            for perturbation in ("none", "wrong_answer"):
                for t in (0.0, 0.7, 1.0):
                    for item in range(40):
                        for sample in range(2):
                            writer.write(record(model, LONG_DATASET, item, perturbation, t, sample))
        writer.write(record("tiny", "chat-set", 1, "none", 0.0, 0, mode="chat",
                            key="tiny|chat-set|i1|chat|none|t=0|s=0", usage=None))
    return path


def check_fits(text: str, width: int = 100) -> None:
    assert "…" not in text, text
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, "\n".join(too_long)


def first_column(text: str, header: str, next_header: str) -> str:
    """The first column's text, its wrapped lines joined (a folded name reads whole again)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if header in line)
    end = lines[start].index(next_header)
    return "".join(line[:end].strip() for line in lines[start + 1:])


@pytest.fixture(autouse=True)
def no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # piped output: the 100-column default, not rich's 80


def test_report_fits_100_columns_with_whole_cells(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(results)]) == 0
    out = capsys.readouterr().out
    check_fits(out)
    rows = json.loads((main(["report", str(results), "--json"]), capsys.readouterr().out)[1])
    for row in rows:  # every number of every row is printed unbroken
        if row["followup_rate"] is not None:
            assert f"{100 * row['followup_rate']:.1f}%" in out
            assert f"[{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]" in out
        if row["delta_vs_none"] is not None:
            assert f"{100 * row['delta_vs_none']:+.1f}" in out
    names = first_column(out, "model / dataset", "perturb")
    assert LONG_MODEL + LONG_DATASET in names  # wrapped, never cut
    starts = ("Qwen", "A17B", "some", "check")
    model_lines = [line.split()[0] for line in out.splitlines() if line.strip().startswith(starts)]
    assert model_lines[:4] == ["Qwen/Qwen3.5-397B-", "A17B-Instruct-FP8-", "some-very-long-", "checkpoint-name"]
    assert not [line for line in out.splitlines() if line != line.rstrip()]  # no trailing spaces
    assert "(chat)" in out and "(raw)" in out  # mixed modes: the mode is named under the dataset
    assert "tokens: 1,170,720 prompt + 38,400 completion, 960 of 961 records reporting usage" in out


def test_report_table_follows_columns(results: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["report", str(results)]) == 0
    check_fits(capsys.readouterr().out, 80)


def test_wide_report_has_every_column(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(results), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    header = " ".join(line for line in out.splitlines()[:4])
    for column in ("items", "follow-ups", "judge fail", "gen err", "unjudged", "labels", "judged by", "prompt tok"):
        assert column in header, column
    row = next(line for line in out.splitlines() if line.startswith(" tiny") or line.startswith("tiny"))
    assert "RQ 1" in row and "judge-a" in row and "100.0% (n=1)" in row


def test_token_totals_per_row(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(results), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    row = next(r for r in rows if r["model"] == "tiny" and r["perturbation"] == "none" and r["temperature"] == 0
               and r["mode"] == "raw")
    assert row["prompt_tokens"] == 2 * sum(1200 + i for i in range(40)) and row["completion_tokens"] == 80 * 40
    assert row["usage_records"] == 80
    chat = next(r for r in rows if r["mode"] == "chat")
    assert (chat["prompt_tokens"], chat["usage_records"]) == (0, 0)


def test_report_tokens_say_when_no_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(record("m", "d", 1, "none", 0.0, 0, usage=None))
    assert main(["report", str(path)]) == 0
    assert "no record carries a usage report" in capsys.readouterr().out


def test_rerank_fits_100_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rerank.jsonl"
    with JsonlWriter(path) as writer:
        for query in range(5):
            for response in range(3):
                for sample in range(2):
                    item = f"q{query}#a{response}"
                    writer.write(ProbeRecord(
                        key=f"{LONG_MODEL}|{LONG_DATASET}|{item}|raw|wrong_answer|t=1|s={sample}", model=LONG_MODEL,
                        dataset=LONG_DATASET, item_id=item, perturbation="wrong_answer", temperature=1.0,
                        sample=sample, seed=0, status="ok", user_turn="u",
                        label=LABELS[(query + response + sample) % 4], correct=response != query % 3,
                        meta={"query_id": f"q{query}", "assistant_sample": response}))
    assert main(["rerank", str(path)]) == 0
    out = capsys.readouterr().out
    check_fits(out)
    assert LONG_MODEL in first_column(out, "model / dataset", "perturb") and "wrong_answer" in out and "AUROC" in out


def test_console_width(monkeypatch: pytest.MonkeyPatch) -> None:
    from userturn.client.terminal import console

    assert console().width == 100 and console(wide=True).width == 300  # piped: explicit, never rich's 80
    monkeypatch.setenv("COLUMNS", "132")
    assert console().width == 132 and console(wide=True).width == 132


def test_posttrain_comparison_fits_100_columns_with_its_notes_below() -> None:
    from userturn.cli.posttrain import comparison_table
    from userturn.client.terminal import console
    from userturn.orchestrate.posttrain import Metric

    rows = [Metric(metric=metric, temperature=t, base_rate=0.681, base_n=72, trained_rate=0.931, trained_n=72,
                   items=12, delta=0.25, ci_low=-0.242, ci_high=0.391,
                   note="no judge model labelled these records (rules only): not measured"
                   if metric == "genuine_followup" else None)
            for t in (0.0, 1.0) for metric in ("genuine_followup", "rule_flagged", "ended_turn")]
    out = console()
    with out.capture() as captured:
        table, notes = comparison_table(rows, f"posttrain posttrain: {LONG_MODEL}-trained vs base on 12 held-out "
                                              "mt-bench items (Δ = trained − base)")
        out.print(table)
        for note in notes:
            out.print(f"  {note}", soft_wrap=True)
    text = captured.get()
    check_fits("\n".join(line for line in text.splitlines() if not line.startswith("  [")))
    assert notes == ["[1] no judge model labelled these records (rules only): not measured"]
    assert text.count("[1]") == 3 and "+25.0" in text and "[-24.2, +39.1]" in text and "93.1%" in text


def test_names_wrap_after_separators_never_mid_word() -> None:
    assert wrap_name("openai/gpt-oss-120b", 18) == "openai/gpt-oss-\n120b"
    assert wrap_name("smollm2-135m-instruct", 14) == "smollm2-135m-\ninstruct"
    assert wrap_name("mt-bench:reference", 24) == "mt-bench:reference"
    assert wrap_name("abcdefghij", 4) == "abcd\nefgh\nij"  # one word wider than the column: the only cut
