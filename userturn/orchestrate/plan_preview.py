"""`userturn run --dry-run`: the plan of an experiment's grid from its file and manifests alone (nothing loaded from
a hub, nothing launched), then each check that needs data, tokenizers or endpoints, every failure one line that
does not stop the others (typed results; the command line prints them). Also the grid selection of `run --limit`
and `run --model`."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from userturn.core.errors import UserError
from userturn.core.options import ProbeOptions, sampler_names
from userturn.orchestrate.experiment import DatasetEntry, Experiment, check_judges
from userturn.orchestrate.grid_spec import Grid, GridModel

if TYPE_CHECKING:
    from userturn.serve.manifest import Manifest


def select(exp: Experiment, limit: int | None = None, models: Sequence[str] = ()) -> Experiment:
    """The grid with every dataset cut to its first `limit` items (a smoke test of the real grid: the same keys as the
    full run, so the full run resumes it) and only the models whose label or model name matches one of the shell
    patterns `models`; no match is a UserError listing the labels."""
    update: dict[str, Any] = {}
    if models:
        kept = [m for m in exp.models if any(fnmatch.fnmatchcase(m.label, p) or
                                             fnmatchcase_or_none(m.model, p) for p in models)]
        if not kept:
            raise UserError(f"--model {' '.join(models)}: no model of {exp.name} matches (its models: "
                            f"{', '.join(m.label for m in exp.models)})")
        update["models"] = kept
    if limit is not None:
        update["limit"] = limit
        update["datasets"] = [d.model_copy(update={"limit": min(d.limit or limit, limit)}) for d in exp.datasets]
    return exp.model_copy(update=update) if update else exp


def fnmatchcase_or_none(value: str | None, pattern: str) -> bool:
    return value is not None and fnmatch.fnmatchcase(value, pattern)


@dataclass
class ModelPlan:
    """One model of the plan: how it is served and the options its runs use."""

    label: str
    served: str
    options: ProbeOptions | None
    problems: list[str] = field(default_factory=list)


@dataclass
class GridPlan:
    """What `run --dry-run` prints first: each model of the grid, from the experiment and its manifests alone."""

    models: list[ModelPlan] = field(default_factory=list)
    manifests: list[Manifest | None] = field(default_factory=list)  # each model's, read once (None: none, or broken)

    def records_per_item(self, grid: Grid) -> int:
        """Records one dataset item gets over the whole grid (every model's temperatures x samples)."""
        per_model = sum(len(m.options.temperatures) * m.options.samples for m in self.models if m.options)
        return per_model * len(grid.modes) * len(grid.perturbations) * grid.assistant_samples


def _served(model: GridModel, m: Manifest | None) -> str:
    """Where a model runs, from its manifest `m` alone: engine, launcher, GPUs and nodes; or its endpoint."""
    source = model.source
    if m is None:
        return f"endpoint {', '.join(source.base_urls or [])} (model {model.model})"
    if m.base_url is not None:
        return f"external endpoint {m.base_url}"
    gpus = m.gpus if m.gpus is not None else 0
    where = f"{m.engine} via {source.launcher}"
    size = [f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "CPU"]
    size += [f"{m.nnodes} nodes"] if m.nnodes > 1 else []
    size += [f"{m.replicas} replicas"] if m.replicas > 1 else []
    return f"{where}, {', '.join(size)} ({m.model})"


def _multi_node(model: GridModel, m: Manifest | None) -> None:
    """Refuse a multi-node manifest under the local launcher: it starts processes on this machine only."""
    if m is not None and m.nnodes > 1 and model.source.launcher == "local":
        raise UserError(f"nnodes: {m.nnodes}, but the local launcher starts processes on this machine only (node 0 "
                        "would wait for the other nodes until its timeout): use --launcher slurm, or `userturn serve "
                        f"{model.source.manifest} --dry-run` for one command per node")


def build_plan(grid: Grid) -> GridPlan:
    """The plan from the grid and its manifests (each read once): a model whose manifest or options do not resolve
    is kept, with its problem, so the rest of the plan still prints."""
    from userturn.orchestrate.run_builder import preview
    from userturn.serve.manifest import load_manifest

    plan = GridPlan()
    for model in grid.models:
        problems: list[str] = []
        served, options = "?", None
        with model.naming(problems):
            manifest = None if model.source.manifest is None else load_manifest(model.source.manifest)
            served = _served(model, manifest)
            options = preview(model.source, model.layers, manifest)[1]
            plan.manifests.append(manifest)
        if problems:
            plan.manifests.append(None)
        else:
            with model.naming(problems):
                _multi_node(model, manifest)
        plan.models.append(ModelPlan(model.label, served, options, problems))
    return plan


def _dataset_line(entry: DatasetEntry, exp: Experiment) -> str:
    limit = entry.limit or exp.limit
    return f"{entry.name or entry.spec}" + (f" (first {limit} items)" if limit else " (all items)")


def plan_lines(exp: Experiment, grid: Grid, plan: GridPlan) -> list[str]:
    """The printed plan: grid size, one line per model (where it is served, its sampling), datasets."""
    per_item = plan.records_per_item(grid)
    title = exp.name if grid.shard is None else f"{exp.name} (shard {grid.shard})"
    lines = [f"{title}: {len(exp.models)} models x {len(exp.datasets)} datasets x {len(exp.modes)} modes "
             f"({', '.join(exp.modes)}) x {len(exp.perturbations)} perturbations ({', '.join(exp.perturbations)})"
             f"{f' x {exp.assistant_samples} assistant samples' if exp.assistant_samples > 1 else ''}: "
             f"{per_item} records per dataset item"]
    lines.append("models:")
    for m in plan.models:
        if m.options is None:
            lines.append(f"  {m.label}: {m.served}")
            continue
        o = m.options
        sampler = ", ".join(f"{name} {value}" for name in sampler_names() if (value := getattr(o, name)) is not None)
        lines.append(f"  {m.label}: {m.served}; temperatures {o.temperatures}, samples {o.samples}, max_tokens "
                     f"{o.max_tokens}, sampler {sampler or 'neutral'}, concurrency {o.concurrency}")
    lines.append("datasets: " + "; ".join(_dataset_line(d, exp) for d in exp.datasets))
    judges = ", ".join(j.model for j in exp.judges) or "none (the rules label what they can; the rest stays unjudged)"
    lines.append(f"judges: {judges}")
    return lines


@dataclass
class Checks:
    """What `run --dry-run` prints after the plan: its lines (stdout), notices and problems (stderr, one line
    each); exit 2 when data, a manifest or a template failed, else 3 when an endpoint did not answer."""

    lines: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    endpoint_problems: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 2 if self.problems else 3 if self.endpoint_problems else 0


def check(exp: Experiment, grid: Grid, plan: GridPlan) -> Checks:
    """The checks that need data, tokenizers or endpoints: datasets load (the grid's own `load_items`, scorer and
    assistant-source checks), each model's chat template renders one real prompt (raw mode), `base_url` models and
    judges answer. A failed check is one line and the others still run."""
    from userturn.client.probe.dry_run import render_preview, shown
    from userturn.core import aio
    from userturn.orchestrate.grid_spec import assistant_source, check_scoring, chosen_scorers, load_items
    from userturn.orchestrate.run_builder import ProbeTarget, load_renderer, preview

    out = Checks(problems=[p for m in plan.models for p in m.problems])  # settings that do not resolve
    chosen = chosen_scorers(grid, plan.manifests)
    loaded = []
    for index, dataset in enumerate(grid.datasets):
        try:
            name, items, _ = load_items(dataset, grid.perturbations, grid.controls)
            notice = check_scoring(grid, name, items, chosen)
            source = assistant_source(grid, dataset, items)
        except UserError as exc:  # named once: by the check itself, else here
            out.problems.append(str(exc) if str(exc).startswith(str(grid.source)) else
                                f"{grid.source}: datasets.{index} ({exp.datasets[index].spec}): {exc}")
            continue
        out.notices += [notice] if notice is not None else []
        loaded.append((name, items, source, len(items if grid.shard is None else grid.shard.select(items))))
    if loaded:
        out.lines.append("items: " + ", ".join(f"{name} {count}" for name, _, _, count in loaded))
    if len(loaded) == len(grid.datasets):
        out.lines.append(f"records planned: {plan.records_per_item(grid) * sum(count for *_, count in loaded)}")
    if "raw" in grid.modes and loaded:
        name, items, source, _ = loaded[0]
        for model, planned, manifest in zip(grid.models, plan.models, plan.manifests, strict=True):
            if planned.options is None:
                continue
            with model.naming(out.problems):
                fields, options = preview(model.source, model.layers, manifest)
                target = ProbeTarget(base_urls=[], model=str(model.model or model.label), **fields)
                prompt = render_preview(load_renderer(target, options), items, source)
                out.lines.append(f"--- {model.label}: raw prompt of the first {name} item, as it will be sent (ends "
                                 f"at the open user header) ---\n{shown(prompt)}\n--- end of prompt ---")
    endpoints = sum(model.source.manifest is None for model in grid.models)
    judges = sum(j.model not in ("self", "rules") and j.base_url is not None for j in exp.judges)
    model_problems = aio.run(_check_endpoints(grid))
    judge_problems = aio.run(check_judges(exp, grid.source))
    launched = len(grid.models) - endpoints
    parts = [f"{endpoints - len(model_problems)} of {endpoints} base_url models reachable and serving their model"
             ] if endpoints else []
    parts += [f"{judges - len(judge_problems)} of {judges} judges reachable and serving theirs"] if judges else []
    parts += [f"{launched} manifest models validated only (launched by the real run)"] if launched else []
    out.lines.append("endpoints: " + "; ".join(parts))
    out.endpoint_problems = model_problems + judge_problems
    return out


async def _check_endpoints(grid: Grid) -> list[str]:
    """The probe's preflight (`TargetSession.check`) on every endpoint model of the grid (manifests are not
    launched); one line per model that fails, naming its entry."""
    from userturn.orchestrate.run_builder import TargetSession, open_target

    problems: list[str] = []
    for model in grid.models:
        if model.source.manifest is not None:
            continue
        with model.naming(problems), open_target(model.source, model.layers) as (target, options):
            async with TargetSession(target, options) as session:
                await session.check()
                for mode in grid.modes:
                    session.check_mode(mode)
    return problems
