"""The progress view shared by probe, judge and run: counters and endpoint stats rendered as a rich view (TTY) or
plain periodic lines; ETA; skipped samples apart from the total; judge requests in flight."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import httpx
import pytest
import respx
from chatml_renderer import Renderer

from userturn.cli import main
from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointConfig, EndpointStats
from userturn.client.probe.perturb import perturb
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings
from userturn.client.probe.progress import Progress, RunCounters, fmt_duration, judge_endpoint_stats
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import Message, ProbeRecord
from userturn.judges.llm_judge import JudgeConfig
from userturn.judges.panel import JudgePanel, PanelConfig


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def make(stream, **kw) -> tuple[Progress, RunCounters, EndpointStats]:
    counters = RunCounters(total=10, skipped=2, done=4, ok=3, errors=1)
    stats = EndpointStats(retries=5, completion_tokens=400)
    stats.inflight[1] = time.monotonic() - 2.0
    return Progress(counters, lambda: [stats], title="t", stream=stream, **kw), counters, stats


def test_line_has_every_figure():
    progress, counters, _ = make(io.StringIO())
    counters.judged, counters.judge_failures, counters.rule_labels = 2, 1, 1
    line = progress.line()
    for part in ("t: 4/10 done (40%)", "ETA ", "req/s", "tok/s", "retries 5", "errors 1", "in flight 1",
                 "judge in flight 0", "judged 2 (rules 1, judge failures 1)", "skipped apart: 2 already done"):
        assert part in line, line
    assert 1.9 <= progress.snapshot()["oldest_s"] < 10  # type: ignore[operator]


def test_eta_is_the_remaining_samples_at_this_runs_rate():
    progress, counters, _ = make(io.StringIO())
    counters.started = time.monotonic() - 8.0  # 4 done in 8 s: 0.5/s, 6 left
    eta = progress.snapshot()["eta_s"]
    assert eta is not None and 11.5 < eta < 12.5
    assert "ETA 12s" in progress.line()
    counters.done = 0
    assert progress.snapshot()["eta_s"] is None and "ETA —" in progress.line()  # unknown before the first sample
    counters.done = 10
    assert progress.snapshot()["eta_s"] == 0.0


def test_durations():
    assert [fmt_duration(s) for s in (None, 4.4, 65, 3599, 7620)] == ["—", "4s", "1m05s", "59m59s", "2h07m"]


def test_not_applicable_samples_are_outside_the_total():
    """The quick start plans 16 samples, 4 of them a perturbation that does not apply: it ends at 12/12."""
    progress, counters, _ = make(io.StringIO())
    counters.total, counters.skipped, counters.done, counters.not_applicable = 16, 0, 12, 4
    line = progress.line()
    assert "12/12 done (100%)" in line and "4 not applicable (perturbation)" in line, line


def test_judge_requests_in_flight_are_shown():
    judge = EndpointStats()
    judge.inflight.update({1: time.monotonic(), 2: time.monotonic(), 3: time.monotonic()})
    progress = Progress(RunCounters(total=5), lambda: [], judge_stats=lambda: [judge], title="t",
                        stream=io.StringIO())
    assert "judge in flight 3" in progress.line()


def test_judge_endpoint_stats_of_a_panel():
    panel = JudgePanel(PanelConfig(judges=[JudgeConfig(model="a", base_url="http://a/v1"),
                                           JudgeConfig(model="b", base_url="http://b/v1")]))
    assert judge_endpoint_stats(panel) == [j.endpoint.stats for j in panel.judges]
    assert judge_endpoint_stats(None) == [] and judge_endpoint_stats(object()) == []


async def test_plain_mode_prints_periodic_lines_and_a_final_one():
    stream = io.StringIO()
    progress, counters, _ = make(stream, plain_interval=0.05)
    assert not progress.rich
    progress.start()
    await asyncio.sleep(0.12)
    counters.done = 10
    await progress.stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and lines[-1].startswith("t: 10/10 done (100%), ETA 0s")
    assert all("\r" not in line and "\x1b" not in line for line in lines)  # plain text, one line each


async def test_no_progress_means_plain_lines_even_on_a_terminal():
    stream = io.StringIO()
    progress, counters, _ = make(stream, enabled=False)
    counters.done = 0
    progress.start()
    await progress.stop()
    assert stream.getvalue() == ""  # nothing done (e.g. an endpoint check failed): no line at all
    stream = Tty()
    progress, counters, _ = make(stream, enabled=False, plain_interval=0.05)
    assert not progress.rich
    progress.start()
    counters.done = 10
    await asyncio.sleep(0.12)
    await progress.stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and lines[-1].startswith("t: 10/10 done (100%)")
    assert all("\x1b" not in line for line in lines)  # plain lines, no live view


async def test_tty_uses_the_rich_view():
    stream = Tty()
    progress, counters, _ = make(stream)
    assert progress.rich
    progress.start()
    counters.done = 7
    await asyncio.sleep(0.3)
    await progress.stop()
    text = stream.getvalue()
    assert "7/10" in text and "retries / errors" in text and "oldest" in text and "ETA" in text
    assert "2 already done" in text


# --- the view in the real loops: probe (with inline judging) and judge ---------------------------------------

PROBE, JUDGE = "http://probe.test/v1", "http://judge.test/v1"




def item(i: int, answer: str) -> DatasetItem:
    return DatasetItem.model_validate({"id": f"q{i}", "answer": "100", "messages": [  # numeric gold: wrong_answer
        {"role": "user", "content": f"Question {i}?"}, {"role": "assistant", "content": answer}]})


def verdict(label: str) -> httpx.Response:
    content = json.dumps({"rationale": "r", "label": label})
    return httpx.Response(200, json={"choices": [{"message": {"content": content}, "finish_reason": "stop"}]})


async def test_probe_with_inline_judge_ends_honest_and_shows_judge_requests_in_flight(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2 items with a number and 2 without: wrong_answer applies to half, so 6 of 8 samples are planned."""
    items = [item(0, "It is 4."), item(1, "It is 7."), item(2, "It depends."), item(3, "Hard to say.")]
    endpoint = Endpoint(EndpointConfig(base_url=PROBE, max_retries=0, backoff_initial=0.0, request_timeout=5))
    panel = JudgePanel(PanelConfig(judges=[JudgeConfig(model="j", base_url=JUDGE, max_retries=0, reasks=0)]))
    seen_in_flight: list[float] = []
    run: ProbeRun | None = None

    def judge_reply(request: httpx.Request) -> httpx.Response:
        assert run is not None
        seen_in_flight.append(run.progress.snapshot()["judge_inflight"])  # type: ignore[arg-type]
        return verdict("genuine_followup")

    with respx.mock(using="httpx", assert_all_called=False) as mock:
        mock.post(f"{PROBE}/completions").mock(return_value=httpx.Response(200, json={
            "choices": [{"text": "Why is that so?", "finish_reason": "stop"}]}))
        mock.post(f"{JUDGE}/chat/completions").mock(side_effect=judge_reply)
        run = ProbeRun(items, ProbeSettings(model="m", dataset="d", concurrency=2,
                                            perturbations=["none", "wrong_answer"]),
                       endpoints=[endpoint], renderer=Renderer(), out_path=str(tmp_path / "o.jsonl"), judge=panel,
                       progress=True, perturb=perturb)
        try:
            summary = await run.run()
        finally:
            await endpoint.aclose()
            await panel.aclose()
    assert (summary.ok, summary.not_applicable) == (6, 2)
    final = capsys.readouterr().err.strip().splitlines()[-1]
    assert "6/6 done (100%)" in final and "2 not applicable (perturbation)" in final, final
    assert seen_in_flight and min(seen_in_flight) >= 1  # the view counted the judge request being answered


def test_judge_command_uses_the_shared_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.jsonl"
    with JsonlWriter(results) as writer:
        for i in range(5):
            writer.write(ProbeRecord(
                key=f"m|d|q{i}|raw|none|t=0|s=0", model="m", dataset="d", item_id=f"q{i}", temperature=0.0,
                sample=0, seed=0, status="ok", user_turn=f"Why does step {i} hold here?",
                messages=[Message(role="user", content=f"Question {i}?"), Message(role="assistant", content="A.")]))
    argv = ["judge", str(results), "--judge-base-url", JUDGE, "--judge-model", "j", "--judge-max-retries", "0"]
    with respx.mock(using="httpx", assert_all_called=False) as mock:
        mock.post(f"{JUDGE}/chat/completions").mock(return_value=verdict("genuine_followup"))
        mock.get(f"{JUDGE}/models").mock(return_value=httpx.Response(200, json={"data": [{"id": "j"}]}))
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert "userturn judge: 5/5 records (100%), ETA 0s, newly judged 5, kept from input 0" in err, err
        assert "5 judge requests" in err and "in flight 0" in err
        assert "newly judged 5 (5 judge requests," in err and "next: userturn report " in err
        assert main(argv) == 0  # resumed: nothing to do, no view, the summary says so
        assert "already done 5" in capsys.readouterr().err
        # the judged file judged again into another file: every verdict is carried over, none is asked again
        judged = tmp_path / "results.judged.jsonl"
        again = ["judge", str(judged), "--out", str(tmp_path / "again.jsonl"), *argv[2:]]
        calls = mock.calls.call_count
        assert main(again) == 0
        err = capsys.readouterr().err
        assert "newly judged 0 (0 judge requests, 0.0 req/s), kept from the input 5" in err, err
        assert "kept from input 5" in err  # the live view's final line
        assert sum(c.request.url.path.endswith("/chat/completions") for c in mock.calls[calls:]) == 0
