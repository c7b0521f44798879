"""`userturn report` on a small judged fixture: groups, table text, --json, --html, --plots, bad inputs."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from userturn.cli import main
from userturn.report.plots import TITLES
from userturn.report.summary import is_self_judged, load_results, summarise

FIXTURE = Path(__file__).parents[1] / "fixtures" / "judges" / "report_small.jsonl"
PNG = b"\x89PNG\r\n\x1a\n"


def groups_by_key() -> dict[tuple, object]:
    return {(g.model, g.mode, g.temperature): g for g in summarise(load_results(FIXTURE))}


def test_summary_counts_match_the_fixture() -> None:
    groups = groups_by_key()
    assert len(groups) == 4
    a = groups[("Qwen/Qwen3-0.6B", "raw", 0.0)]
    assert (a.records, a.n, a.followups, a.judge_failures, a.generation_errors, a.unjudged) == (10, 8, 4, 1, 1, 0)
    assert a.followup_rate == 0.5 and (round(a.ci_low, 4), round(a.ci_high, 4)) == (0.2152, 0.7848)
    assert a.labels["restates_query"] == 2 and a.rule_labels == 2
    assert a.accuracy == pytest.approx(6 / 9) and a.accuracy_n == 9
    assert a.judges == ["judge-a", "judge-b"] and a.self_judged == 0
    b = groups[("Qwen/Qwen3-0.6B", "raw", 1.0)]
    assert (b.n, b.followups, b.accuracy) == (5, 1, None)
    c = groups[("Qwen/Qwen3-0.6B", "chat", 0.0)]  # chat mode is its own group, never mixed with raw
    assert (c.n, c.followups, c.self_judged) == (4, 4, 4)
    d = groups[("other-model", "raw", 0.0)]
    assert (d.n, d.followups, d.unjudged, d.followup_rate) == (2, 0, 1, 0.0)
    assert d.accuracy == pytest.approx(1 / 3)


def test_self_judged_matching() -> None:
    records = {r.item_id: r for r in load_results(FIXTURE)}
    assert is_self_judged(records["c1"])  # "Qwen/Qwen3-0.6B" judged by "Qwen3-0.6B"
    assert not is_self_judged(records["a1"])


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(FIXTURE), "--wide"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "Qwen/Qwen3-0.6B" in line and "raw" in line and " 0 " in line)
    assert re.search(r"50\.0%\s+\[21\.5, 78\.5\]", row)
    assert "GF 4 RQ 2 AC 1 GE 1" in row
    assert "SELF" in out and "self-judged" in out
    assert "Wilson" in out
    assert "Cohen" in out and "0.714" in out and "83.3%" in out


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(FIXTURE), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4
    for key in ("model", "dataset", "perturbation", "temperature", "n", "followups", "followup_rate", "ci_low",
                "ci_high", "judge_failures", "labels", "accuracy", "mode"):
        assert all(key in row for row in rows), key
    raw0 = next(r for r in rows if r["model"] == "Qwen/Qwen3-0.6B" and r["mode"] == "raw" and r["temperature"] == 0)
    assert (raw0["n"], raw0["followups"], raw0["judge_failures"]) == (8, 4, 1)
    assert round(raw0["ci_low"], 4) == 0.2152 and raw0["labels"]["genuine_followup"] == 4
    assert set(raw0["labels"]) == {"genuine_followup", "restates_query", "assistant_continuation",
                                   "meta_commentary", "generic", "related_new_query", "unrelated_query", "empty"}


def test_html_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html_path, plots = tmp_path / "out" / "report.html", tmp_path / "plots"
    assert main(["report", str(FIXTURE), "--html", str(html_path), "--plots", str(plots), "--json"]) == 0
    assert not list(plots.glob("perturbation_effects.*"))  # nothing to show (no pairable perturbed row): not written
    assert "not drawn (nothing to show): perturbation_effects: no perturbed row paired" in capsys.readouterr().err
    for name in ("followup_vs_temperature", "accuracy_vs_followup", "label_mix"):
        png = (plots / f"{name}.png").read_bytes()
        assert png.startswith(PNG) and len(png) > 5000
        assert (plots / f"{name}.pdf").read_bytes().startswith(b"%PDF")
        assert b"<svg" in (plots / f"{name}.svg").read_bytes()
    html = html_path.read_text()
    captions = re.findall(r'<figure id="fig-[a-z_]+"><figcaption>([^<]+)</figcaption>\n<svg', html)
    assert captions == [TITLES["followup_vs_temperature"], TITLES["accuracy_vs_followup"], TITLES["label_mix"]]
    assert f"<li>{TITLES['perturbation_effects']}: no perturbed row paired" in html
    assert "<script>" not in html and "&lt;script&gt;" in html  # generated text is escaped
    assert "&lt;b&gt;&amp;amp;&lt;/b&gt;" in html
    assert "self-judged" in html and "0.714" in html and "genuine_followup" in html
    assert "I think it is a follow-up" in html  # raw output of the failed judge is shown
    assert "src=\"http" not in html  # self-contained


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_a_file_without_records_is_named_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      text: str) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text(text)
    assert main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{empty}: no userturn records to report" in err


def test_missing_file_and_malformed_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "results file not found" in err
    bad = tmp_path / "bad.jsonl"
    shutil.copy(FIXTURE, bad)
    with bad.open("a") as fh:
        fh.write('{"key": "x"}\n')
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:23:" in err and err.count("\n") == 1


def test_unwritable_html_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", str(FIXTURE), "--html", str(blocker / "r.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_without_matplotlib_the_html_is_written_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails as if not installed
    html_path, plots = tmp_path / "report.html", tmp_path / "plots"
    assert main(["report", str(FIXTURE), "--html", str(html_path), "--plots", str(plots)]) == 1
    err = capsys.readouterr().err
    assert f"no figures written to {plots}: matplotlib is not installed (pip install matplotlib" in err
    assert not plots.exists() or not list(plots.iterdir())
    html = html_path.read_text()
    assert "No figures: matplotlib is not installed" in html and "<svg" not in html
    assert "Follow-up rate by group" in html  # the rest of the report is all there
