"""Running a grid (an experiment's, or a probe's one cell): every model probed on every dataset x mode into one
results file, one model at a time or with up to K servers launching at once (`run --parallel-models`)."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from userturn.orchestrate.grid_spec import GridModel, Prepared, PreparedDataset, expand_assistant_samples
from userturn.orchestrate.run_builder import ProbeOptions

log = logging.getLogger("userturn")


async def run_grid(prepared: Prepared, *, parallel_models: int = 1, failures: list[str] | None = None
                   ) -> list[Any]:
    """Probe a prepared grid (`grid_spec.prepare`) into its results file, held under the writer lock (exit 2 if
    another run has it) -> the run summaries. With `failures` (`--keep-going`), a failing model is recorded there
    and the grid goes on."""
    from userturn.core.results_lock import results_lock
    from userturn.orchestrate.run_builder import open_target

    grid = prepared.grid
    summaries: list[Any] = []
    with results_lock(grid.out):  # a second writer stops before any launch
        if grid.on_start is not None:
            grid.on_start(grid.out.parent)
        if parallel_models > 1:
            await _models_ahead(prepared, parallel_models, summaries, failures)
            return summaries
        for index, model in enumerate(grid.models):
            if _finished(prepared, index, summaries):
                continue
            with model.naming(failures), \
                    open_target(model.source, model.layers, prepared.manifests[index]) as (target, options):
                summaries += await probe_model(prepared, target, options)
    return summaries


def _finished(prepared: Prepared, index: int, summaries: list[Any]) -> bool:
    """True (and its summary added) when a manifest model's records are all done already: no server is started."""
    from userturn.client.probe.settings import ProbeSummary
    from userturn.orchestrate.finished import finished_records

    model = prepared.grid.models[index]
    if not prepared.grid.reuse_finished:
        return False
    with model.naming():
        done = finished_records(prepared, index)
    if done is None:
        return False
    log.info(f"userturn: {model.label}: all {done} records are done with these settings; its server is not started")
    summaries.append(ProbeSummary(total=done, skipped=done, ok=0, errors=0, elapsed_s=0.0))
    return True


def _runs(prepared: Prepared, session: Any, data: PreparedDataset, panel: Any) -> list[Any]:
    """The runs of one dataset on one served model, one per mode."""
    grid, n = prepared.grid, prepared.grid.assistant_samples
    probe_items = expand_assistant_samples(data.items, n)
    pool = expand_assistant_samples(data.every, n) if data.every is not None else None
    model = session.target.model
    return [session.probe_run(
        probe_items, dataset=data.name, mode=mode, perturbations=grid.perturbations,
        assistant_from=data.assistant_from, out_path=str(grid.out), judge=panel, progress=grid.progress,
        progress_title=f"{grid.title}: {model} on {data.name} ({mode})" if grid.title else None,
        partner_pool=pool, resume_hint=grid.resume_hint) for mode in grid.modes]


async def probe_model(prepared: Prepared, target: Any, options: ProbeOptions) -> list[Any]:
    """Every dataset x mode of one served model (its judge panel checked first), in order; the summaries."""
    from userturn.core.resume_index import scan_results
    from userturn.orchestrate.run_builder import TargetSession

    grid = prepared.grid
    panel = grid.judges(target.model, target.base_urls[0], options) if grid.judges is not None else None
    try:
        if panel is not None:
            await panel.check()
        async with TargetSession(target, options) as session:
            if "raw" in grid.modes:
                session.renderer  # noqa: B018 - load the chat template before any request: a bad one stops here
            await session.check()
            runs = [run for data in prepared.datasets for run in _runs(prepared, session, data, panel)]
            if len(runs) > 1:  # every run of this model is checked before any of them writes (one run: by itself)
                existing = scan_results(grid.out)
                for run in runs:
                    run.check_resume(existing)
            return [await run.run() for run in runs]
    finally:
        if panel is not None:
            await panel.aclose()


async def _models_ahead(prepared: Prepared, window: int, summaries: list[Any],
                        failures: list[str] | None = None) -> None:
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
    models: tuple[GridModel, ...] = prepared.grid.models
    upcoming = iter(range(len(models)))

    def start_next() -> None:
        """Enter the next unfinished model's target in a thread of the pool, if a model is left."""
        while (index := next(upcoming, None)) is not None and _finished(prepared, index, summaries):
            pass
        if index is not None:
            model = models[index]
            cm = open_target(model.source, model.layers, prepared.manifests[index])
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
            with models[index].naming(failures):
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
                with models[index].naming(failures):
                    summaries += await probe_model(prepared, target, options)
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
