"""Training progress: a transformers `TrainerCallback` that drives a rich progress bar (loss, steps, s/step, ETA).

On a terminal it is a live bar; otherwise (CI, a log file) one plain line every `every` steps and at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from transformers import TrainerCallback


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class RichProgress(TrainerCallback):
    """Steps done / total, the latest training loss, seconds per step and the time left."""

    def __init__(self, title: str = "train", *, live: bool | None = None, every: int = 10, stream: Any = None) -> None:
        self.title = title
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.every = max(1, every)
        self.loss: float | None = None
        self.losses: list[tuple[int, float]] = []
        self.started = 0.0
        self._progress: Any = None
        self._task: Any = None

    def seconds_per_step(self, step: int) -> float | None:
        """Mean seconds per step so far (the first step, with its warm-up, counted from the start)."""
        if step <= 0:
            return None
        return (time.monotonic() - self.started) / step

    def line(self, step: int, total: int) -> str:
        sps = self.seconds_per_step(step)
        loss = f"loss {self.loss:.4f}" if self.loss is not None else "loss —"
        rate = f"{sps:.2f} s/step" if sps is not None else "— s/step"
        eta = f"ETA {_clock(sps * (total - step))}" if sps is not None else "ETA —"
        spent = _clock(time.monotonic() - self.started)
        return f"{self.title}: step {step}/{total}, {loss}, {rate}, {eta}, elapsed {spent}"

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.monotonic()
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]}"),
                TextColumn("ETA"), TimeRemainingColumn(), console=Console(file=self.stream), transient=False)
            self._progress.start()
            self._task = self._progress.add_task(self.title, total=state.max_steps, loss="—", rate="")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step, total = state.global_step, state.max_steps
        if self._progress is not None:
            sps = self.seconds_per_step(step)
            self._progress.update(self._task, completed=step, rate=f"{sps:.2f} s/step" if sps else "")
        elif step % self.every == 0 and step < total:
            print(self.line(step, total), file=self.stream, flush=True)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.loss = float(logs["loss"])
            self.losses.append((state.global_step, self.loss))
            if self._progress is not None:
                self._progress.update(self._task, loss=f"{self.loss:.4f}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        print(self.line(state.global_step, state.max_steps), file=self.stream, flush=True)
