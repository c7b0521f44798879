"""The front door from Python: `userturn.probe(...)` (one model on one dataset) and `userturn.run(experiment)` (a
grid), the same path the `probe` and `run` commands take (`probe_job.probe_grid` / `experiment.grid_of`, then
`grid_spec.prepare` and `grid.run_grid`). Both block until the run is done; inside a running event loop (a
notebook) the run gets a thread and a loop of its own."""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from userturn.core.options import Options
from userturn.core.shards import Shard
from userturn.orchestrate.experiment import Experiment, check_files, load_experiment

if TYPE_CHECKING:
    from userturn.client.probe.settings import ProbeSummary
    from userturn.judges.panel import PanelConfig
    from userturn.orchestrate.run_builder import Launcher, Mode

T = TypeVar("T")
log = logging.getLogger("userturn")


def complete(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion: on this thread, or on a thread of its own when this one runs an event loop."""
    import asyncio

    from userturn.core import aio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return aio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="userturn-run") as pool:
        return pool.submit(aio.run, coro).result()


def _shard(shard: Shard | str | None) -> Shard | None:
    return Shard.parse(shard) if isinstance(shard, str) else shard


def probe(dataset: str, *, out: str | Path, base_url: str | Sequence[str] | None = None, model: str | None = None,
          manifest: str | None = None, launcher: Launcher | None = None, api_key_env: str | None = None,
          api_key_file: str | None = None, mode: Mode = "raw", perturbations: Sequence[str] | None = None,
          assistant_from: Literal["dataset", "model"] | None = None, dataset_name: str | None = None,
          limit: int | None = None, shuffle_seed: int | None = None, shard: Shard | str | None = None,
          judges: PanelConfig | None = None, progress: bool = False, options: Options | None = None,
          **settings: Any) -> ProbeSummary:
    """Probe one model on one dataset into `out` (resumable), as `userturn probe` does; the run's summary.

    The model is a server you run (`base_url` and `model`) or a manifest launched for the run (`manifest`: a file
    or a shipped name). `settings` are `Options` fields (`temperatures=[0, 1]`, `samples=2`, `tokenizer=...`,
    `max_tokens=...`), or pass them as one `options`; `judges` is a `PanelConfig` to judge inline. Errors are
    `UserError`s with the command line's one-line message."""
    from userturn.orchestrate.grid import run_grid
    from userturn.orchestrate.grid_spec import prepare
    from userturn.orchestrate.probe_job import probe_grid
    from userturn.orchestrate.run_builder import TargetSource

    urls = [base_url] if isinstance(base_url, str) else list(base_url) if base_url is not None else None
    layer = (options or Options()).merge(Options(**settings))
    target = TargetSource(manifest=manifest, base_urls=urls, model=model, api_key_env=api_key_env,
                          launcher=launcher, api_key_file=api_key_file)
    grid = probe_grid(dataset=dataset, out=out, target=target, options=layer, mode=mode, perturbations=perturbations,
                      assistant_from=assistant_from, dataset_name=dataset_name, limit=limit,
                      shuffle_seed=shuffle_seed, shard=_shard(shard), judges=judges, progress=progress)
    prepared = prepare(grid)
    for notice in prepared.notices:  # shown where logging is not configured (Python's last-resort handler)
        log.warning(notice)
    [summary] = complete(run_grid(prepared))
    return summary


def open_experiment(experiment: str | Path | Experiment, *, limit: int | None = None, models: Sequence[str] = (),
                    base: str | Path | None = None) -> tuple[Experiment, Path, Path]:
    """(experiment, the folder its paths are relative to, the source errors name) for a file, a shipped name or an
    `Experiment` (its paths relative to `base`, default the working directory); cut to `limit` items and the
    `models` patterns (`plan_preview.select`), every manifest it names found."""
    from userturn.orchestrate.plan_preview import select

    if isinstance(experiment, Experiment):
        folder = Path(base) if base is not None else Path.cwd()
        exp, source = experiment, folder / f"<experiment {experiment.name}>"
    else:
        exp, folder = load_experiment(experiment)
        from userturn.core.shipped import resolve_named

        source = resolve_named(experiment, "experiments")
    exp = select(exp, limit, models)
    check_files(exp, source)
    return exp, folder, source


@dataclass(frozen=True)
class RunResult:
    """A grid's run: its results file, each run's summary, one line per model that failed (`keep_going`) and the
    notices said with it (answers no scorer reads)."""

    results: Path
    summaries: list[ProbeSummary]
    failures: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @property
    def ok(self) -> int:
        return sum(s.ok for s in self.summaries)

    @property
    def errors(self) -> int:
        return sum(s.errors for s in self.summaries)

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self.summaries)


def run(experiment: str | Path | Experiment, *, out_dir: str | Path | None = None, limit: int | None = None,
        models: Sequence[str] = (), launcher: Launcher | None = None, rejudge: bool = False,
        parallel_models: int = 1, shard: Shard | str | None = None, keep_going: bool = False,
        progress: bool = False, base: str | Path | None = None) -> RunResult:
    """Run an experiment's grid (a YAML file, a shipped name such as `smoke`, or an `Experiment`) into
    `<out_dir>/<name>/results.jsonl`, as `userturn run` does (resumable; `keep_going`: a failing model is listed in
    `failures` and the others go on)."""
    from userturn.orchestrate.experiment import grid_of
    from userturn.orchestrate.grid import run_grid
    from userturn.orchestrate.grid_spec import prepare

    exp, folder, source = open_experiment(experiment, limit=limit, models=models, base=base)
    grid = grid_of(exp, folder, source, out_dir=None if out_dir is None else str(out_dir), launcher=launcher,
                   shard=_shard(shard), progress=progress, rejudge=rejudge)
    prepared = prepare(grid)
    failures: list[str] | None = [] if keep_going else None
    summaries = complete(run_grid(prepared, parallel_models=parallel_models, failures=failures))
    return RunResult(grid.out, summaries, failures or [], prepared.notices)
