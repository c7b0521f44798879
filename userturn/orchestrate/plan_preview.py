"""`userturn run --dry-run`: the plan of an experiment from its file and manifests alone (nothing loaded from a
hub, nothing launched), then each check that needs data, tokenizers or endpoints, every failure one line that does
not stop the others. Also the grid selection of `run --limit` and `run --model`."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from userturn.core.errors import UserError
from userturn.core.options import ProbeOptions, sampler_names
from userturn.orchestrate.experiment import DatasetEntry, Experiment, ModelEntry, naming_entry, target_source


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
    problem: str | None = None


@dataclass
class Plan:
    models: list[ModelPlan] = field(default_factory=list)

    def records_per_item(self, exp: Experiment) -> int:
        """Records one dataset item gets over the whole grid (every model's temperatures x samples)."""
        per_model = sum(len(m.options.temperatures) * m.options.samples for m in self.models if m.options)
        return per_model * len(exp.modes) * len(exp.perturbations) * exp.assistant_samples


def _served(entry: ModelEntry, exp: Experiment, base: Path, launcher: str | None) -> str:
    """Where a model runs, from its manifest alone: engine, launcher, GPUs and nodes; or its endpoint."""
    if entry.base_url is not None:
        return f"endpoint {entry.base_url} (model {entry.model})"
    from userturn.serve.manifest import load_manifest

    source = target_source(entry, exp, base, launcher)
    m = load_manifest(str(source.manifest))
    if m.base_url is not None:
        return f"external endpoint {m.base_url}"
    gpus = m.gpus if m.gpus is not None else 0
    where = f"{m.engine} via {source.launcher}"
    size = [f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "CPU"]
    size += [f"{m.nnodes} nodes"] if m.nnodes > 1 else []
    size += [f"{m.replicas} replicas"] if m.replicas > 1 else []
    return f"{where}, {', '.join(size)} ({m.model})"


def build_plan(exp: Experiment, base: Path, source: Path, launcher: str | None = None) -> Plan:
    """The plan from the experiment and its manifests: a model whose manifest or options do not resolve is kept,
    with its problem, so the rest of the plan still prints."""
    from userturn.orchestrate.run_builder import preview

    plan = Plan()
    for index, entry in enumerate(exp.models):
        problems: list[str] = []
        served, options = "?", None
        with naming_entry(source, index, entry, problems):
            served = _served(entry, exp, base, launcher)
            options = preview(target_source(entry, exp, base, launcher), [entry.layer(), exp.layer()])[1]
        plan.models.append(ModelPlan(entry.label, served, options, problems[0] if problems else None))
    return plan


def _dataset_line(entry: DatasetEntry, exp: Experiment) -> str:
    limit = entry.limit or exp.limit
    return f"{entry.name or entry.spec}" + (f" (first {limit} items)" if limit else " (all items)")


def plan_lines(exp: Experiment, plan: Plan, title: str) -> list[str]:
    """The printed plan: grid size, one line per model (where it is served, its sampling), datasets."""
    per_item = plan.records_per_item(exp)
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
