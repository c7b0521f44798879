"""`report --format csv|markdown|latex` and the row filters / order, on a hand-computed file: model `m-9B` labels
1 of 4 items genuine at T=0 unperturbed (25.0%, Wilson 95% 4.6–69.9), 0 of 4 under wrong_answer (Δ -25.0 pp);
model `m-0.8B` the same at 2 of 4 (50.0%)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from userturn.cli import main
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord, record_key


def record(model: str, item: int, perturbation: str, genuine: bool, t: float = 0.0) -> ProbeRecord:
    label = "genuine_followup" if genuine else "generic"
    return ProbeRecord(key=record_key(model, "gsm8k", f"q{item}", perturbation, t, 0), model=model, dataset="gsm8k",
                       item_id=f"q{item}", perturbation=perturbation, temperature=t, sample=0, seed=0, status="ok",
                       user_turn="u", label=label, label_source="judge", judge_status="ok",
                       judges=[{"judge": "j", "source": "judge", "status": "ok", "label": label}])


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as writer:
        for model, genuine in (("m-9B", 1), ("m-0.8B", 2)):
            for perturbation in ("wrong_answer", "none"):  # the none rows come second in the file
                for item in range(4):
                    writer.write(record(model, item, perturbation, perturbation == "none" and item < genuine))
    return path


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["report", *argv]) == 0
    return capsys.readouterr().out


def test_csv_rows_by_size_none_first_rates_as_fractions(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(csv.DictReader(io.StringIO(report(capsys, str(results), "--format", "csv"))))
    assert [(r["model"], r["perturbation"]) for r in rows] == [
        ("m-0.8B", "none"), ("m-0.8B", "wrong_answer"), ("m-9B", "none"), ("m-9B", "wrong_answer")]
    nine = rows[2]
    assert (nine["n"], nine["followups"], float(nine["followup_rate"])) == ("4", "1", 0.25)
    assert round(float(nine["ci_low"]), 4) == 0.0456 and round(float(nine["ci_high"]), 4) == 0.6994
    assert nine["delta_vs_none"] == "" and float(rows[3]["delta_vs_none"]) == -0.25
    assert (nine["label:genuine_followup"], nine["label:generic"], nine["judges"]) == ("1", "3", "j")


def test_markdown_and_latex_carry_the_table(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = report(capsys, str(results), "--format", "markdown", "--model", "m-9B")
    lines = md.splitlines()
    assert lines[0] == ("| model | dataset | perturbation | T | n | follow-up % [95% CI] | Δ vs none pp [95% CI] | "
                        "accuracy % | excluded |")
    assert lines[1] == "|---|---|---|---:|---:|---:|---:|---:|---:|"
    assert lines[2] == "| m-9B | gsm8k | none | 0 | 4 | 25.0 [4.6, 69.9] | — | — | 0/0/0 |"
    assert lines[3].startswith("| m-9B | gsm8k | wrong_answer | 0 | 4 | 0.0 [0.0, 49.0] | -25.0 [")
    tex = report(capsys, str(results), "--format", "latex", "--perturb", "none")
    assert "\\begin{tabular}{lllrrrrrr}" in tex and "\\toprule" in tex and "\\bottomrule" in tex
    assert "m-0.8B & gsm8k & none & 0 & 4 & 50.0 [15.0, 85.0] & --- & --- & 0/0/0 \\\\" in tex
    assert "\\%" in tex and "$\\Delta$" in tex and "wrong\\_answer" not in tex
    for text in (md, tex):
        assert not [line for line in text.splitlines() if line != line.rstrip()]


def test_filters_keep_delta_and_name_what_is_present(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(csv.DictReader(io.StringIO(report(capsys, str(results), "--format", "csv", "--model", "*-9B",
                                                  "--perturb", "wrong_answer"))))
    assert [(r["model"], r["perturbation"]) for r in rows] == [("m-9B", "wrong_answer")]
    assert float(rows[0]["delta_vs_none"]) == -0.25  # paired against the none row that was filtered out
    assert main(["report", str(results), "--model", "gpt*"]) == 2
    err = capsys.readouterr().err
    assert err == "userturn: error: --model gpt*: matches nothing in the results (present: m-0.8B, m-9B)\n"
    assert main(["report", str(results), "--temperature", "0.7"]) == 2
    assert "no row at that temperature (present: 0)" in capsys.readouterr().err
    assert main(["report", str(results), "--json", "--format", "csv"]) == 2
    assert "choose one output format" in capsys.readouterr().err


def test_model_order_overrides_size(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(csv.DictReader(io.StringIO(report(capsys, str(results), "--format", "csv", "--model-order",
                                                  "m-9B"))))
    assert [r["model"] for r in rows] == ["m-9B", "m-9B", "m-0.8B", "m-0.8B"]
    assert main(["report", str(results), "--model-order", "nope"]) == 2
    assert "--model-order: no model named nope" in capsys.readouterr().err


def test_terminal_table_has_no_trailing_spaces_and_none_first(results: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    text = report(capsys, str(results))
    assert not [line for line in text.splitlines() if line != line.rstrip()]
    lines = text.splitlines()
    first_9b = next(i for i, line in enumerate(lines) if line.startswith(" m-9B") or line.startswith("m-9B"))
    assert " none " in lines[first_9b] and "0.8B" in "".join(lines[:first_9b])


def test_latex_negatives_are_minus_signs_and_names_keep_their_hyphens(results: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    tex = report(capsys, str(results), "--format", "latex", "--perturb", "wrong_answer", "--model", "m-9B")
    row = next(line for line in tex.splitlines() if line.startswith("m-9B"))
    assert "& $-$25.0 [$-$" in row and "-2" not in row.replace("$-$", "")


def test_the_format_flag_offers_exactly_the_renderers() -> None:
    """`report --format`'s choices (written out in the parser, which loads nothing heavy) are the table and the
    renderers of userturn/report/formats.py: a new format is a function and its RENDERERS entry, named in the flag."""
    from userturn.cli import build_parser
    from userturn.report.formats import FORMATS, RENDERERS

    report_parser = next(a for a in build_parser()._actions if a.dest == "command").choices["report"]
    choices = next(a.choices for a in report_parser._actions if a.dest == "format")
    assert list(choices) == list(FORMATS) == ["table", *RENDERERS]
