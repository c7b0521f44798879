"""A judge that failed on some records is named as such in every report format, with the one command that labels
exactly those records again (on the source file, never `X.judged.judged.jsonl`)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import httpx
import pytest
import respx

from userturn.cli import main
from userturn.core.records import JudgeVerdict, ProbeRecord, record_key
from userturn.report.label_notice import FAILURE_SHARE, label_notice
from userturn.report.summary import summarise

FIXTURES = Path(__file__).parents[1] / "fixtures" / "judges"
BASE = "http://judge.test/v1"
GARBAGE = httpx.Response(200, json={"choices": [{"message": {"content": "no idea"}, "finish_reason": "stop"}]})
OK = httpx.Response(200, json={"choices": [{"message": {"content": '{"rationale": "r", "label": "generic"}'}}]})


def judge(argv: list[str], reply: httpx.Response) -> int:
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.get("/models").mock(return_value=httpx.Response(404))
        route = mock.post("/chat/completions").mock(return_value=reply)
        main(argv)
        return route.call_count


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["report", *argv]) == 0
    return capsys.readouterr().out


@pytest.fixture
def judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """results.jsonl judged by a judge whose every reply is unusable: results.judged.jsonl, 5 judge failures."""
    monkeypatch.setenv("COLUMNS", "1000")  # one notice per line: the command is read back whole
    results = tmp_path / "results.jsonl"
    shutil.copy(FIXTURES / "results_small.jsonl", results)
    judge(["judge", str(results), "--judge-base-url", BASE, "--judge-model", "kw", "--judge-reasks", "0",
           "--no-progress"], GARBAGE)
    return tmp_path / "results.judged.jsonl"


def test_a_failed_judge_is_named_with_the_command_that_retries_exactly_those(
        judged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = report(capsys, str(judged))
    assert "rules only" not in out and "add a judge" not in out and "judged.judged" not in out
    lines = out.splitlines()
    notice = next(i for i, line in enumerate(lines) if line.startswith("NOTICE: the judge failed on 5 of 8 generated"))
    assert notice < next(i for i, line in enumerate(lines) if "userturn report:" in line)  # above the table
    assert "(judge failed: no rate below is a measurement)" in out
    command = out.split("Retry exactly those (keeps every ok verdict): ", 1)[1].splitlines()[0]
    source = judged.with_name("results.jsonl")
    assert command == f"userturn judge {source} --judge-base-url URL --judge-model kw"
    argv = [*shlex.split(command.replace("URL", BASE))[1:], "--no-progress"]
    assert judge(argv, OK) == 5  # exactly the 5 failed records, into the same judged copy
    assert not judged.with_name("results.judged.judged.jsonl").exists()
    again = report(capsys, str(judged))
    assert "judge failed" not in again and "NOTICE" not in again


def test_markdown_and_latex_carry_the_judge_failure_caveat(judged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = report(capsys, str(judged), "--format", "markdown")
    assert md.startswith("> **Caveat:** The judge failed on 5 of 8 generated records (outside n); no judge model")
    assert f"Retry: userturn judge {judged.with_name('results.jsonl')} --judge-base-url URL --judge-model kw" in md
    tex = report(capsys, str(judged), "--format", "latex")
    assert tex.startswith("% CAVEAT: The judge failed on 5 of 8 generated records") and "\\begin{tabular}" in tex


def test_an_unjudged_file_is_not_a_measurement_in_markdown_and_latex(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.jsonl"
    shutil.copy(FIXTURES / "results_small.jsonl", results)
    for fmt, prefix in (("markdown", "> **Caveat:** "), ("latex", "% CAVEAT: ")):
        text = report(capsys, str(results), "--format", fmt)
        assert text.startswith(prefix + "No record is labelled by a judge model: not a measurement."), text


def _rows(failed: int, of: int) -> list[ProbeRecord]:
    """One row of `of` generated records, the judge failed on `failed`, the others labelled generic."""
    out = []
    for i in range(of):
        ok = i >= failed
        verdict = JudgeVerdict(judge="j", status="ok" if ok else "error", label="generic" if ok else None)
        out.append(ProbeRecord(key=record_key("m", "d", f"q{i}", "none", 0.0, 0), model="m", dataset="d",
                               item_id=f"q{i}", temperature=0.0, sample=0, seed=0, status="ok", user_turn="u",
                               label="generic" if ok else None, label_source="judge" if ok else None,
                               judge_status="ok" if ok else "error", judges=[verdict]))
    return out


def test_a_partial_failure_above_the_threshold_goes_above_the_table(tmp_path: Path) -> None:
    assert FAILURE_SHARE == 0.05
    below = label_notice(summarise(_rows(1, 20)), tmp_path / "r.jsonl")  # 5%: a column and a line under it
    above = label_notice(summarise(_rows(2, 20)), tmp_path / "r.jsonl")  # 10%: a notice above the table
    assert below is not None and not below.above and "may be biased" not in below.text
    assert "the judge failed on 1 of 20 generated records (5%" in below.text
    assert above is not None and above.above and "may be biased" in above.text and "2 of 20" in above.text
    assert "userturn judge " + str(tmp_path / "r.jsonl") + " --judge-base-url URL --judge-model j" in above.text


def test_the_report_counts_the_reasks_for_quoted_or_conflicting_verdicts(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from userturn.core.jsonl import JsonlWriter
    from userturn.report.summary import summarise_file

    records = _rows(0, 4)
    records[0].judges[0].quote_reasks, records[3].judges[0].quote_reasks = 2, 1
    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as writer:
        for r in records:
            writer.write(r)
    assert summarise_file(path).quote_reasks == 3
    out = " ".join(report(capsys, str(path)).split())
    assert "judge re-asks: 3 replies held only a verdict quoted from the generated turn, or two different" in out
    html = tmp_path / "r.html"
    assert main(["report", str(path), "--html", str(html)]) == 0
    assert "judge re-asks: 3 replies" in " ".join(html.read_text().split())


def test_the_html_report_names_the_failed_judge_above_the_table(judged: Path) -> None:
    html = judged.with_name("report.html")
    assert main(["report", str(judged), "--html", str(html)]) == 0
    page = " ".join(html.read_text().split())
    notice = page.index('<p class="warn">the judge failed on 5 of 8 generated records')
    assert notice < page.index('<h2 id="figures">') < page.index('<h2 id="rows">')  # above every figure and table
    assert f"userturn judge {judged.with_name('results.jsonl')} --judge-base-url URL --judge-model kw" in page
    assert "rules only" not in page and "judged.judged" not in page


def test_the_run_printout_names_a_failed_inline_judge(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from userturn.core.jsonl import JsonlWriter
    from userturn.report.run_view import print_run_report

    path = tmp_path / "results.jsonl"
    with JsonlWriter(path) as writer:
        for r in _rows(4, 4):  # the inline judge failed on every record
            writer.write(r)
    out = io.StringIO()
    print_run_report(Console(file=out, width=1000), path)
    text = out.getvalue()
    assert "(judge failed: no rate below is a measurement)" in text and "rules only" not in text
    assert text.index("NOTICE: the judge failed on 4 of 4 generated records") < text.index("userturn report:")
    # one retry command on the run's screen: the run's own (its failure lines say the same), not `userturn judge`
    assert "Retry exactly those (keeps every ok verdict): rerun the same command" in text
    assert "userturn judge" not in text


def test_a_rules_only_file_is_not_a_measurement_in_markdown_and_latex(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from userturn.core.jsonl import JsonlWriter

    path = tmp_path / "r.jsonl"
    with JsonlWriter(path) as writer:
        for r in _rows(0, 3):
            r.label, r.label_source, r.judges = "empty", "rule", []
            writer.write(r)
    for fmt, prefix in (("markdown", "> **Caveat:** "), ("latex", "% CAVEAT: ")):
        text = report(capsys, str(path), "--format", fmt)
        assert text.startswith(prefix + "Labelled by rules only (they never label a genuine follow-up): not a "
                                        "measurement."), text


def test_the_retry_command_names_the_prompt_the_panel_used() -> None:
    from userturn.judges.prompt import packaged_prompt
    from userturn.report.label_notice import _prompt_flag

    assert _prompt_flag({packaged_prompt("judge_v3").sha256[:12]}) == ""  # the default
    assert _prompt_flag({packaged_prompt("judge_v2").sha256[:12]}) == " --judge-prompt judge_v2"
    assert _prompt_flag({"0123456789ab"}) == " --judge-prompt FILE.md"
