"""Live progress, one view for `probe`, `judge` and `run`: a rich view on a terminal, plain lines otherwise (and with
`--no-progress`: every 10 s, and one at the end of a finished run). Resumed samples and samples whose perturbation
does not apply are counted apart, outside the total, so a finished run reads N/N.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich loads only when the live view is shown
    from rich.live import Live
    from rich.table import Table

    from userturn.client.http.endpoint import EndpointStats

PLAIN_INTERVAL_S = 10.0


@dataclass
class RunCounters:
    """Counts the pipeline (or the judge loop) updates as samples complete (cheap integer bumps only)."""

    total: int = 0  # planned by this run, resumed samples already taken out
    skipped: int = 0  # already ok in the results file (resume): not in `total`
    done: int = 0
    ok: int = 0
    errors: int = 0
    judged: int = 0
    judge_failures: int = 0
    rule_labels: int = 0
    kept: int = 0  # `judge`: records labelled by verdicts they already carried (no request sent); not in `judged`
    not_applicable: int = 0  # samples whose perturbation does not apply to the item (no record; out of the total)
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return max(1e-9, time.monotonic() - self.started)

    @property
    def planned(self) -> int:
        """What this run will actually do: the total without the not-applicable samples."""
        return max(self.done, self.total - self.not_applicable)


def judge_endpoint_stats(judge: Any) -> list[EndpointStats]:
    """The live stats of a judge panel's endpoints (none for no judge, or a rules-only one)."""
    return [j.endpoint.stats for j in getattr(judge, "judges", ()) if hasattr(j, "endpoint")]


def fmt_duration(seconds: float | None) -> str:
    """45s, 3m05s, 2h07m; '—' while unknown."""
    if seconds is None:
        return "—"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Renders RunCounters plus the endpoints' live stats (probe and judge), refreshed a few times a second."""

    def __init__(
        self,
        counters: RunCounters,
        stats: Callable[[], list[EndpointStats]],
        *,
        judge_stats: Callable[[], list[EndpointStats]] | None = None,
        title: str = "userturn probe",
        enabled: bool = True,
        plain_interval: float = PLAIN_INTERVAL_S,
        stream: Any = None,
        kind: str = "probe",
        requests_before: int = 0,
    ) -> None:
        self.counters = counters
        self._stats = stats
        self._judge_stats = judge_stats or (lambda: [])
        self.title = title
        self.stream = stream or sys.stderr
        self.rich = enabled and self.stream.isatty()
        self.enabled = enabled  # False (--no-progress): plain lines, never the live view
        self.plain_interval = plain_interval
        self._task: asyncio.Task | None = None
        self._live: Live | None = None
        self.kind = kind  # "probe" (probe and run) or "judge": the judge's own fields, its requests' rate
        self.requests_before = requests_before  # judge requests sent before the run (the endpoint check)

    def _shared(self, stats: list[EndpointStats], elapsed: float) -> dict[str, float | None]:
        """What both views show: done of planned, the ETA at this run's own rate, the requests in flight."""
        c = self.counters
        remaining = max(0, c.planned - c.done)
        return {"done": c.done, "total": c.planned, "pct": 100.0 * c.done / c.planned if c.planned else 100.0,
                "skipped": c.skipped, "elapsed_s": elapsed,
                "eta_s": 0.0 if remaining == 0 else (remaining / (c.done / elapsed) if c.done else None),
                "inflight": sum(len(s.inflight) for s in stats),
                "oldest_s": max((s.oldest_inflight_age() for s in stats), default=0.0)}

    def snapshot(self) -> dict[str, float | None]:
        c = self.counters
        stats, judge_stats = self._stats(), self._judge_stats()
        elapsed = c.elapsed()
        tokens = sum(s.completion_tokens for s in (stats or judge_stats))  # the probe's own tokens when it has any
        return {**self._shared(stats, elapsed), "not_applicable": c.not_applicable, "ok": c.ok, "errors": c.errors,
                "req_s": c.done / elapsed, "tok_s": tokens / elapsed,
                "retries": sum(s.retries for s in stats + judge_stats),
                "judge_inflight": sum(len(s.inflight) for s in judge_stats), "judged": c.judged,
                "judge_failures": c.judge_failures, "rule_labels": c.rule_labels}

    def judge_snapshot(self) -> dict[str, float | None]:
        """The judge view's numbers: records done, judge requests actually sent and their rate (verdicts carried
        over from the input are counted apart: no request was sent for them)."""
        c = self.counters
        stats = self._judge_stats()
        elapsed = c.elapsed()
        requests = sum(s.requests for s in stats) - self.requests_before
        return {**self._shared(stats, elapsed), "judged": c.judged, "kept": c.kept, "rule_labels": c.rule_labels,
                "judge_failures": c.judge_failures, "requests": requests, "req_s": requests / elapsed,
                "retries": sum(s.retries for s in stats)}

    def _judge_line(self) -> str:
        s = self.judge_snapshot()
        text = (f"{self.title}: {s['done']:.0f}/{s['total']:.0f} records ({s['pct']:.0f}%), ETA "
                f"{fmt_duration(s['eta_s'])}, newly judged {s['judged']:.0f}, kept from input {s['kept']:.0f}, "
                f"rules {s['rule_labels']:.0f}, judge failures {s['judge_failures']:.0f}; {s['requests']:.0f} "
                f"judge requests ({s['req_s']:.1f} req/s), retries {s['retries']:.0f}, in flight "
                f"{s['inflight']:.0f} (oldest {s['oldest_s']:.1f}s)")
        return text + (f"; already done {s['skipped']:.0f}" if s["skipped"] else "")

    def _judge_table(self) -> Table:
        from rich.table import Table

        s = self.judge_snapshot()
        table = Table(title=self.title, title_justify="left", show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("records", f"{s['done']:.0f}/{s['total']:.0f} ({s['pct']:.1f}%)"
                      + (f"; already done {s['skipped']:.0f}" if s["skipped"] else ""))
        table.add_row("elapsed / ETA", f"{fmt_duration(s['elapsed_s'])} / {fmt_duration(s['eta_s'])}")
        table.add_row("newly judged", f"{s['judged']:.0f}")
        table.add_row("kept from input", f"{s['kept']:.0f} (verdicts already there: no request)")
        table.add_row("rule labels", f"{s['rule_labels']:.0f}")
        table.add_row("judge failures", f"{s['judge_failures']:.0f}")
        table.add_row("judge requests", f"{s['requests']:.0f} ({s['req_s']:.1f} req/s), retries {s['retries']:.0f}")
        table.add_row("in flight", f"{s['inflight']:.0f} (oldest {s['oldest_s']:.1f}s)")
        return table

    def _skipped_text(self, s: dict[str, float | None]) -> str:
        parts = []
        if s["skipped"]:
            parts.append(f"{s['skipped']:.0f} already done")
        if s["not_applicable"]:
            parts.append(f"{s['not_applicable']:.0f} not applicable (perturbation)")
        return ", ".join(parts)

    def line(self) -> str:
        """One plain line: what a log file gets every few seconds."""
        if self.kind == "judge":
            return self._judge_line()
        s = self.snapshot()
        text = (f"{self.title}: {s['done']:.0f}/{s['total']:.0f} done ({s['pct']:.0f}%), ETA "
                f"{fmt_duration(s['eta_s'])}, {s['req_s']:.1f} req/s, {s['tok_s']:.0f} tok/s, retries "
                f"{s['retries']:.0f}, errors {s['errors']:.0f}, in flight {s['inflight']:.0f} (oldest "
                f"{s['oldest_s']:.1f}s)")
        if s["judge_inflight"] or s["judged"] or s["judge_failures"] or s["rule_labels"]:
            text += (f", judge in flight {s['judge_inflight']:.0f}, judged {s['judged']:.0f} (rules "
                     f"{s['rule_labels']:.0f}, judge failures {s['judge_failures']:.0f})")
        skipped = self._skipped_text(s)
        return text + (f"; skipped apart: {skipped}" if skipped else "")

    def _table(self) -> Table:
        from rich.table import Table

        if self.kind == "judge":
            return self._judge_table()
        s = self.snapshot()
        table = Table(title=self.title, title_justify="left", show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("done", f"{s['done']:.0f}/{s['total']:.0f} ({s['pct']:.1f}%)")
        skipped = self._skipped_text(s)
        if skipped:
            table.add_row("skipped", skipped)
        table.add_row("elapsed / ETA", f"{fmt_duration(s['elapsed_s'])} / {fmt_duration(s['eta_s'])}")
        table.add_row("rate", f"{s['req_s']:.1f} req/s, {s['tok_s']:.0f} tok/s")
        table.add_row("retries / errors", f"{s['retries']:.0f} / {s['errors']:.0f}")
        table.add_row("in flight", f"{s['inflight']:.0f} (oldest {s['oldest_s']:.1f}s)")
        if s["judge_inflight"] or s["judged"] or s["judge_failures"] or s["rule_labels"]:
            table.add_row("judge in flight", f"{s['judge_inflight']:.0f}")
            table.add_row("judged", f"{s['judged']:.0f} (rule labels {s['rule_labels']:.0f}, "
                                    f"judge failures {s['judge_failures']:.0f})")
        return table

    async def _loop(self) -> None:
        if self.rich:
            while True:
                await asyncio.sleep(0.25)
                if self._live is not None:
                    self._live.update(self._table(), refresh=True)
        while True:
            await asyncio.sleep(self.plain_interval)
            print(self.line(), file=self.stream, flush=True)

    def start(self) -> None:
        self.counters.started = time.monotonic()  # the rate and ETA count from the first sample, not set-up
        if self.rich:
            from rich.console import Console
            from rich.live import Live

            # Refreshed by `_loop` in the event loop, not by a thread of its own.
            self._live = Live(self._table(), console=Console(file=self.stream), auto_refresh=False, transient=False)
            self._live.start()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._live is not None:
            self._live.update(self._table())
            self._live.stop()
            self._live = None
        elif self.enabled or 0 < self.counters.done >= self.counters.planned:  # --no-progress: a finished run's
            print(self.line(), file=self.stream, flush=True)  # last line; a fatal error stays the only line
