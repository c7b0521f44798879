"""What a grid is, whoever asks for it: models (each a target and its option layers), datasets, modes and
perturbations, where the records go and how errors name their source. `userturn run` builds one from an experiment
file (`experiment.grid_of`), `userturn probe` and `userturn.probe()` a one-cell one (`probe_job.probe_grid`);
`prepare` loads and checks every dataset before anything launches (the one `load_items`, the one assistant-source
decision, the shard cut), and `grid.run_grid` probes what it prepared."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from userturn.client.data.dataset import DatasetItem
from userturn.core.errors import UserError
from userturn.core.options import Options, ProbeOptions, merged
from userturn.core.shards import Shard, check_split, sharded_path
from userturn.orchestrate.run_builder import Mode, TargetSource

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest

AssistantChoice = Literal["dataset", "model", "auto"]
PanelFactory = Callable[[str, str, ProbeOptions], Any]  # (model, its base URL, options) -> judge panel or None


@contextlib.contextmanager
def named(where: str | None, failures: list[str] | None = None) -> Iterator[None]:
    """A UserError raised inside names `where` (`x.yaml: models.1 (name): ...`; None: left as it is). With
    `failures` (`run --keep-going`) its line is added there instead, unless the results file itself failed."""
    from userturn.core.results_lock import ResultsLocked, ResultsWriteError

    try:
        yield
    except UserError as exc:
        named_exc = UserError(f"{where}: {exc}") if where is not None else exc
        named_exc.exit_code = exc.exit_code
        if failures is None or isinstance(exc, ResultsWriteError | ResultsLocked):
            if named_exc is exc:
                raise
            raise named_exc from None
        failures.append(str(named_exc))


@dataclass(frozen=True, kw_only=True)
class GridModel:
    """One model of a grid: where its requests go, its option layers (highest precedence first), the model name
    given (else its manifest's), and how its errors are named (None: unnamed, a probe's one model)."""

    label: str
    source: TargetSource
    layers: tuple[Options, ...]
    model: str | None = None
    where: str | None = None

    def naming(self, failures: list[str] | None = None) -> contextlib.AbstractContextManager[None]:
        return named(self.where, failures)


@dataclass(frozen=True, kw_only=True)
class GridDataset:
    """One dataset of a grid: a built-in `NAME[:split]` or a JSONL path, the name recorded (default: from the
    spec), the items selected, and where the assistant turns come from (None/auto: decided from the items)."""

    spec: str
    name: str | None = None
    limit: int | None = None
    shuffle_seed: int | None = None
    assistant_from: AssistantChoice | None = None
    label: str | None = None  # how errors name it (an experiment's spec as written); default: name, else spec


@dataclass(frozen=True, kw_only=True)
class Grid:
    """Every model probed on every dataset x mode x perturbation, into one results file (a shard's into its own)."""

    models: tuple[GridModel, ...]
    datasets: tuple[GridDataset, ...]
    results: Path  # the unsharded results file
    modes: tuple[Mode, ...] = ("raw",)
    perturbations: tuple[str, ...] = ("none",)
    assistant_samples: int = 1
    shard: Shard | None = None
    title: str | None = None  # heads each run's progress view (`NAME: model on dataset (mode)`); None: the probe's
    source: Path | None = None  # the experiment file errors name; None: flags (errors unprefixed)
    assistant_how: str = "--assistant-from model"  # what chooses model-written turns, named in errors
    scorer_how: str = "--scorer"  # what chooses a scorer, named in the unscored-answers notice
    resume_hint: str = "use another --out"
    judges: PanelFactory | None = None
    judge_models: bool = False  # the panel has judge models (not the rules alone): a finished part must be labelled
    rejudge: bool = False
    reuse_finished: bool = False  # a manifest model whose records are all done already is not launched
    progress: bool = True
    on_start: Callable[[Path], None] | None = None  # called with the run directory before the first model (run)

    @property
    def out(self) -> Path:
        """The file this grid (or its shard) writes."""
        return sharded_path(self.results, self.shard)

    @property
    def controls(self) -> bool:
        """Whether a model's runs add the human-turn controls (they take another item's turn: every item loads)."""
        return any(merged(reversed(model.layers)).controls for model in self.models)

    def prefixed(self, what: str, exc: UserError) -> UserError:
        """`exc` naming the experiment file and `what` (a flag-built grid's errors stay as they are)."""
        if self.source is None:
            return exc
        out = UserError(f"{self.source}: {what}: {exc}")
        out.exit_code = exc.exit_code
        return out


@dataclass(frozen=True)
class PreparedDataset:
    """One dataset as the grid probes it: name, this shard's items, every item when a perturbation takes partners
    from the others, where the assistant turns come from, and how many items were selected before the shard cut."""

    name: str
    items: Sequence[DatasetItem]
    every: Sequence[DatasetItem] | None
    assistant_from: Literal["dataset", "model"]
    selected: int


@dataclass
class Prepared:
    """A grid with its datasets loaded and checked, and each manifest read once (None: it failed to load, and its
    launch names the problem); `notices` are said with the run's summary (answers no scorer reads)."""

    grid: Grid
    datasets: list[PreparedDataset]
    manifests: list[Manifest | None]
    notices: list[str] = field(default_factory=list)


def load_items(dataset: GridDataset, perturbations: Sequence[str], controls: bool = False,
               ) -> tuple[str, Sequence[DatasetItem], Sequence[DatasetItem] | None]:
    """(recorded name, the items to probe, every item when a perturbation or the human-turn `controls` take
    partners from the others: unchanged by `limit`)."""
    from userturn.client.data.loaders import load_items as load_spec
    from userturn.client.probe.perturbations import needs_partner

    name, items, every = load_spec(dataset.spec, limit=dataset.limit, shuffle_seed=dataset.shuffle_seed,
                                   whole=needs_partner(list(perturbations)) or controls)
    return dataset.name or name, items, every


def assistant_source(grid: Grid, dataset: GridDataset, items: Sequence[DatasetItem]) -> Literal["dataset", "model"]:
    """Where one dataset's assistant turns come from, decided on every selected item so each shard takes them from
    where the unsharded run does (`run_builder.assistant_source`); an error names the experiment file and dataset."""
    from userturn.orchestrate.run_builder import assistant_source as decide

    if grid.assistant_samples > 1:
        return "model"
    try:
        return decide(items, dataset.assistant_from, how=grid.assistant_how)
    except UserError as exc:
        raise grid.prefixed(f"dataset {dataset.label or dataset.name or dataset.spec}", exc) from None


def read_manifests(grid: Grid) -> list[Manifest | None]:
    """Each model's manifest, read once (None: an endpoint model, or one that fails to load: its launch says why)."""
    from userturn.serve.manifest import load_manifest

    out: list[Manifest | None] = []
    for model in grid.models:
        try:
            out.append(None if model.source.manifest is None else load_manifest(model.source.manifest))
        except UserError:
            out.append(None)
    return out


def chosen_scorers(grid: Grid, manifests: Sequence[Manifest | None]) -> set[str | None]:
    """The scorer each model's runs choose (its layers, else its manifest's)."""
    from userturn.orchestrate.run_builder import preview

    chosen: set[str | None] = set()
    for model, manifest in zip(grid.models, manifests, strict=True):
        try:
            chosen.add(preview(model.source, model.layers, manifest)[1].scorer)
        except UserError:  # a manifest that cannot be read: its launch names the entry (`--keep-going` skips it)
            chosen.add(merged(reversed(model.layers)).scorer)
    return chosen


def check_scoring(grid: Grid, name: str, items: Sequence[DatasetItem], chosen: set[str | None]) -> str | None:
    """`scoring.preflight` of one dataset under each scorer its models choose (before anything launches); the
    one-line notice when its items carry an `answer` no scorer reads, else None."""
    from userturn.client.probe import scoring

    for scorer in sorted(chosen, key=str):
        try:
            scoring.preflight(name, items, scorer)
        except UserError as exc:
            raise grid.prefixed(f"dataset {name}", exc) from None
    return scoring.unscored_notice(name, items, None, grid.scorer_how) if None in chosen else None


def expand_assistant_samples(items: Sequence[DatasetItem], n: int) -> Sequence[DatasetItem]:
    """N copies of each item (ids `<id>#a<j>`, meta query_id/assistant_sample), each answered by the model with its
    own seed; `userturn rerank` groups them back by query_id."""
    if n == 1:
        return items
    out = []
    for item in items:
        for j in range(n):
            meta = {**(item.meta or {}), "query_id": item.id, "assistant_sample": j}
            out.append(item.model_copy(update={"id": f"{item.id}#a{j}", "meta": meta}))
    return out


def prepare(grid: Grid) -> Prepared:
    """Load and check every dataset of `grid` before any server starts: the split of the results file, the items,
    the scorers, where the assistant turns come from; then this shard's cut of each."""
    check_split(grid.results, grid.shard, hint=grid.resume_hint)
    loaded = [load_items(dataset, grid.perturbations, grid.controls) for dataset in grid.datasets]
    names = [name for name, _, _ in loaded]
    if len(set(names)) != len(names):
        raise UserError(f"{grid.source}: datasets: two datasets are recorded as the same name ({names}); set `name`")
    manifests = read_manifests(grid)
    chosen = chosen_scorers(grid, manifests)
    prepared = Prepared(grid, [], manifests)
    for (name, items, every), dataset in zip(loaded, grid.datasets, strict=True):
        notice = check_scoring(grid, name, items, chosen)
        if notice is not None:
            prepared.notices.append(notice)
        source = assistant_source(grid, dataset, items)  # an impossible choice stops before any launch
        shard_items = grid.shard.select(items) if grid.shard is not None else items
        prepared.datasets.append(PreparedDataset(name, shard_items, every, source, len(items)))
    return prepared
