"""The progress view: counters and endpoint stats rendered as a rich view (TTY) or plain periodic lines."""

from __future__ import annotations

import asyncio
import io
import time

from userturn.client.endpoint import EndpointStats
from userturn.client.progress import Progress, RunCounters


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
    for part in ("4/10 done (2 resumed)", "req/s", "tok/s", "retries 5", "errors 1", "in flight 1",
                 "judged 2 (rules 1, judge failures 1)"):
        assert part in line, line
    assert 1.9 <= progress.snapshot()["oldest_s"] < 10


async def test_plain_mode_prints_periodic_lines_and_a_final_one():
    stream = io.StringIO()
    progress, counters, _ = make(stream, plain_interval=0.05)
    assert not progress.rich
    progress.start()
    await asyncio.sleep(0.12)
    counters.done = 10
    await progress.stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and lines[-1].startswith("t: 10/10 done")


async def test_disabled_prints_nothing():
    stream = io.StringIO()
    progress, _, _ = make(stream, enabled=False)
    progress.start()
    await progress.stop()
    assert stream.getvalue() == ""


async def test_tty_uses_the_rich_view():
    stream = Tty()
    progress, counters, _ = make(stream)
    assert progress.rich
    progress.start()
    counters.done = 7
    await asyncio.sleep(0.3)
    await progress.stop()
    text = stream.getvalue()
    assert "7/10" in text and "retries / errors" in text and "oldest" in text
