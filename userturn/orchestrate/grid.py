"""Running an experiment's grid: every model probed on every dataset x mode into one results file, one model at a
time or with up to K servers launching at once (`run --parallel-models`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from userturn.client.data.dataset import DatasetItem
from userturn.core.errors import UserError
from userturn.core.shards import Shard, check_split, sharded_path
from userturn.orchestrate.experiment import (
    RESUME_HINT,
    Experiment,
    assistant_source,
    check_scoring,
    expand_assistant_samples,
    judge_panel,
    load_items,
    naming_entry,
    results_path,
    target_source,
    write_manifest,
)
from userturn.orchestrate.run_builder import ProbeOptions

log = logging.getLogger("userturn")


async def run_experiment(exp: Experiment, base: Path, source: Path, *, out_dir: str | None = None,
                         progress: bool = True, rejudge: bool = False, launcher: str | None = None,
                         parallel_models: int = 1, failures: list[str] | None = None,
                         shard: Shard | None = None) -> tuple[Path, list[Any]]:
    """Run the grid into `<out_dir>/<name>/results.jsonl` (a `shard`'s items into its own file beside it) -> (results
    path, run summaries). With `failures` (`--keep-going`), a failing model is recorded there and the grid goes on."""
    from userturn.orchestrate.run_builder import open_target

    check_split(results_path(exp, out_dir), shard, hint=RESUME_HINT)
    results = sharded_path(results_path(exp, out_dir), shard)
    run_dir = results.parent
    loaded = [load_items(entry, exp, base) for entry in exp.datasets]  # before any server starts
    names = [name for name, _, _ in loaded]
    if len(set(names)) != len(names):
        raise UserError(f"{source}: datasets: two datasets are recorded as the same name ({names}); set `name`")
    datasets = []
    for (name, items, every), dataset in zip(loaded, exp.datasets, strict=True):
        check_scoring(exp, base, source, name, items)
        # decided on every selected item (`assistant_from: dataset` on open conversations is refused here), so
        # each shard takes its assistant turns from where the unsharded run does
        chosen = assistant_source(dataset, exp, items, source)
        datasets.append(_Dataset(name, shard.select(items) if shard is not None else items, every, chosen))
    write_manifest(run_dir, exp, source)
    summaries: list[Any] = []
    grid = _Grid(exp, datasets, results, progress, rejudge)
    if parallel_models > 1:
        await _models_ahead(exp, base, source, launcher, parallel_models, grid, summaries, failures)
        return results, summaries
    for index, entry in enumerate(exp.models):
        layers = [entry.layer(), exp.layer()]
        if _finished(grid, index, entry, base, source, launcher, summaries):
            continue
        with naming_entry(source, index, entry, failures), \
                open_target(target_source(entry, exp, base, launcher), layers) as (target, options):
            summaries += await grid.probe_model(target, options)
    return results, summaries


def _finished(grid: _Grid, index: int, entry: Any, base: Path, source: Path, launcher: str | None,
              summaries: list[Any]) -> bool:
    """True (and its summary added) when a manifest model's records are all done already: no server is started."""
    from userturn.client.probe.settings import ProbeSummary
    from userturn.orchestrate.finished import finished_records

    with naming_entry(source, index, entry):
        done = finished_records(entry, grid.exp, base, grid.datasets, grid.results, launcher, grid.rejudge)
    if done is None:
        return False
    log.info(f"userturn: {entry.label}: all {done} records are done with these settings; its server is not started")
    summaries.append(ProbeSummary(total=done, skipped=done, ok=0, errors=0, elapsed_s=0.0))
    return True


@dataclass(frozen=True)
class _Dataset:
    """One dataset of the grid: recorded name, items probed, every item when `swap` is planned, assistant source."""

    name: str
    items: Sequence[DatasetItem]
    every: Sequence[DatasetItem] | None
    assistant_from: Literal["dataset", "model"]


@dataclass
class _Grid:
    """What every model of the grid is probed on, and where its records go."""

    exp: Experiment
    datasets: list[_Dataset]
    results: Path
    progress: bool
    rejudge: bool

    async def probe_model(self, target: Any, options: ProbeOptions) -> list[Any]:
        """Every dataset x mode of one served model (its judge panel checked first), in order; the summaries."""
        from userturn.core.resume_index import scan_results
        from userturn.orchestrate.run_builder import TargetSession

        exp, results = self.exp, self.results
        panel = judge_panel(exp, target.model, target.base_urls[0], options, self.rejudge)
        try:
            if panel is not None:
                await panel.check()
            async with TargetSession(target, options) as session:
                if "raw" in exp.modes:
                    session.renderer  # noqa: B018 - load the chat template before any request
                await session.check()
                runs = []
                for data in self.datasets:
                    name, every = data.name, data.every
                    probe_items = expand_assistant_samples(data.items, exp.assistant_samples)
                    pool = expand_assistant_samples(every, exp.assistant_samples) if every is not None else None
                    for mode in exp.modes:
                        runs.append(session.probe_run(
                            probe_items, dataset=name, mode=mode, perturbations=exp.perturbations,
                            assistant_from=data.assistant_from, out_path=str(results),
                            judge=panel, progress=self.progress,
                            progress_title=f"{exp.name}: {target.model} on {name} ({mode})", partner_pool=pool,
                            resume_hint=RESUME_HINT))
                existing = scan_results(results)
                for run in runs:  # every run of this model is checked before any of them writes
                    run.check_resume(existing)
                return [await run.run() for run in runs]
        finally:
            if panel is not None:
                await panel.aclose()


async def _models_ahead(exp: Experiment, base: Path, source: Path, launcher: str | None, window: int, grid: _Grid,
                        summaries: list[Any], failures: list[str] | None = None) -> None:
    """Up to `window` models' targets entered at once, each in a thread of its own (a launch blocks while its job is
    queued and its server starts); the ready ones are probed one at a time in the order they became ready, so the
    results file keeps one writer, and each is stopped (its job cancelled) before the next model is launched. On an
    error or Ctrl-C, launches still waiting give up (`serve.process.ABORT`) and every entered target is exited."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from userturn.orchestrate.run_builder import open_target
    from userturn.serve.process import ABORT

    ABORT.clear()
    # Own threads, `window` launches + one stop: the default executor (min(32, CPUs + 4) threads) could have every
    # thread waiting on a queued job while a finished model's stop waits for a thread.
    pool = ThreadPoolExecutor(max_workers=window + 1, thread_name_prefix="userturn-launch")
    loop = asyncio.get_running_loop()
    entering: dict[asyncio.Future[Any], tuple[int, Any]] = {}  # future of __enter__ -> (model index, its context)
    ready: list[tuple[int, Any, Any]] = []  # (model index, context, (target, options)), in the order they came
    upcoming = iter(enumerate(exp.models))

    def start_next() -> None:
        """Enter the next unfinished model's target in a thread of the pool, if a model is left."""
        while (nxt := next(upcoming, None)) is not None and _finished(grid, *nxt, base, source, launcher, summaries):
            pass
        if nxt is not None:
            index, entry = nxt
            cm = open_target(target_source(entry, exp, base, launcher), [entry.layer(), exp.layer()])
            entering[loop.run_in_executor(pool, cm.__enter__)] = (index, cm)

    async def leave(cm: Any) -> None:
        """Stop the model's servers (cancel its job) in a thread: that waits for the processes or for SLURM."""
        await loop.run_in_executor(pool, cm.__exit__, None, None, None)

    async def take_ready(wait: bool) -> None:
        if not entering:
            return
        done, _ = await asyncio.wait(entering, return_when=asyncio.FIRST_COMPLETED) if wait else (
            {f for f in entering if f.done()}, None)
        for future in sorted(done, key=lambda f: entering[f][0]):
            index, cm = entering.pop(future)
            with naming_entry(source, index, exp.models[index], failures):
                ready.append((index, cm, future.result()))
                continue
            start_next()  # this launch failed (`--keep-going`): the others go on

    try:
        for _ in range(window):
            start_next()
        while entering or ready:
            await take_ready(wait=not ready)
            if not ready:
                continue  # every launch that finished failed (`--keep-going`)
            index, cm, (target, options) = ready.pop(0)
            try:
                with naming_entry(source, index, exp.models[index], failures):
                    summaries += await grid.probe_model(target, options)
            finally:
                await leave(cm)
            start_next()
            await take_ready(wait=False)
    except BaseException:
        ABORT.set()  # launches still waiting for their servers give up within a second
        for future, (_, cm) in list(entering.items()):
            with contextlib.suppress(BaseException):  # a launch that failed has nothing to stop
                await asyncio.shield(future)
                ready.append((-1, cm, None))
        for _, cm, _ in ready:
            await leave(cm)
        raise
    finally:
        ABORT.clear()
        pool.shutdown(wait=False)
