"""Live progress: a rich view on a TTY, periodic plain lines otherwise (or with --no-progress)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich loads only when the live view is shown
    from rich.live import Live
    from rich.table import Table
    from userturn.client.endpoint import EndpointStats


@dataclass
class RunCounters:
    """Counts the pipeline updates as samples complete (cheap integer bumps only)."""

    total: int = 0
    skipped: int = 0  # already ok in the results file (resume)
    done: int = 0
    ok: int = 0
    errors: int = 0
    judged: int = 0
    judge_failures: int = 0
    rule_labels: int = 0
    not_applicable: int = 0  # samples whose perturbation does not apply to the item (no record written)
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return max(1e-9, time.monotonic() - self.started)


class Progress:
    """Renders RunCounters plus the endpoints' live stats, refreshed a few times a second."""

    def __init__(
        self,
        counters: RunCounters,
        stats: Callable[[], list[EndpointStats]],
        *,
        title: str = "userturn probe",
        enabled: bool = True,
        plain_interval: float = 10.0,
        stream=None,
    ) -> None:
        self.counters = counters
        self._stats = stats
        self.title = title
        self.stream = stream or sys.stderr
        self.rich = enabled and self.stream.isatty()
        self.enabled = enabled
        self.plain_interval = plain_interval
        self._task: asyncio.Task | None = None
        self._live: Live | None = None

    def snapshot(self) -> dict[str, float]:
        c = self.counters
        stats = self._stats()
        elapsed = c.elapsed()
        completion_tokens = sum(s.completion_tokens for s in stats)
        return {
            "done": c.done,
            "total": c.total,
            "skipped": c.skipped,
            "ok": c.ok,
            "errors": c.errors,
            "req_s": c.done / elapsed,
            "tok_s": completion_tokens / elapsed,
            "retries": sum(s.retries for s in stats),
            "inflight": sum(len(s.inflight) for s in stats),
            "oldest_s": max((s.oldest_inflight_age() for s in stats), default=0.0),
            "judged": c.judged,
            "judge_failures": c.judge_failures,
            "rule_labels": c.rule_labels,
            "elapsed_s": elapsed,
        }

    def line(self) -> str:
        s = self.snapshot()
        text = (
            f"{self.title}: {s['done']:.0f}/{s['total']:.0f} done ({s['skipped']:.0f} resumed), "
            f"{s['req_s']:.1f} req/s, {s['tok_s']:.0f} tok/s, retries {s['retries']:.0f}, "
            f"errors {s['errors']:.0f}, in flight {s['inflight']:.0f} (oldest {s['oldest_s']:.1f}s)"
        )
        if s["judged"] or s["judge_failures"] or s["rule_labels"]:
            text += f", judged {s['judged']:.0f} (rules {s['rule_labels']:.0f}, judge failures " \
                    f"{s['judge_failures']:.0f})"
        return text

    def _table(self) -> Table:
        from rich.table import Table

        s = self.snapshot()
        table = Table(title=self.title, show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        pct = 100.0 * s["done"] / s["total"] if s["total"] else 100.0
        table.add_row("done", f"{s['done']:.0f}/{s['total']:.0f} ({pct:.1f}%), {s['skipped']:.0f} resumed")
        table.add_row("rate", f"{s['req_s']:.1f} req/s, {s['tok_s']:.0f} tok/s")
        table.add_row("retries / errors", f"{s['retries']:.0f} / {s['errors']:.0f}")
        table.add_row("in flight", f"{s['inflight']:.0f} (oldest {s['oldest_s']:.1f}s)")
        if s["judged"] or s["judge_failures"] or s["rule_labels"]:
            table.add_row("judged", f"{s['judged']:.0f} (rule labels {s['rule_labels']:.0f}, "
                                    f"judge failures {s['judge_failures']:.0f})")
        table.add_row("elapsed", f"{s['elapsed_s']:.1f}s")
        return table

    async def _loop(self) -> None:
        if self.rich:
            while True:
                await asyncio.sleep(0.25)
                if self._live is not None:
                    self._live.update(self._table())
        while True:
            await asyncio.sleep(self.plain_interval)
            print(self.line(), file=self.stream, flush=True)

    def start(self) -> None:
        if not self.enabled:
            return
        if self.rich:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._table(), console=Console(file=self.stream), refresh_per_second=4, transient=False)
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
        elif self.enabled:
            print(self.line(), file=self.stream, flush=True)
