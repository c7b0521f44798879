"""Whether a launched model's part of a grid is finished already, so a resumed `run` with nothing left for it does not
start its server: every planned record in the results file, ok, made with the options the model would run with now,
and labelled when the grid has judge models (the rules alone label as records are written). Anything less (or
anything not known without the server: a perturbation that does not apply to an item leaves its keys missing)
launches it as before, and the probe's own resume decides what is left."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userturn.core.options import is_neutral, sampler_names
from userturn.core.records import ProbeRecord, record_key
from userturn.orchestrate.grid_spec import Grid, Prepared, PreparedDataset, expand_assistant_samples

Group = tuple[str, str, str, str]  # (dataset, item id, mode, perturbation): the keys of one perturbed conversation


def planned_groups(model: str, grid: Grid, datasets: Sequence[PreparedDataset], temperatures: Sequence[float],
                   samples: int) -> dict[Group, tuple[Any, list[str]]]:
    """Every record key one model's runs plan (every item, mode, perturbation, temperature and sample), with its
    item, grouped by (dataset, item id, mode, perturbation)."""
    return {(data.name, item.id, mode, perturbation): (item, [record_key(model, data.name, item.id, perturbation, t,
                                                                        k, mode)
                                                             for t in temperatures for k in range(samples)])
            for data in datasets for item in expand_assistant_samples(data.items, grid.assistant_samples)
            for mode in grid.modes for perturbation in grid.perturbations}


def _not_applicable(item: Any, perturbation: str, unperturbed: ProbeRecord | None, seed: int) -> bool:
    """Whether `perturbation` does not apply to the item's conversation as its `none` record holds it, decided
    offline as the probe decides it (False when that needs the server or another item's turn)."""
    from userturn.client.probe.perturb import PerturbationNotApplicable, perturb
    from userturn.client.probe.perturbations import needs_partner
    from userturn.client.probe.seeds import perturbation_seed

    if unperturbed is None or unperturbed.status != "ok" or perturbation == "none" or needs_partner([perturbation]):
        return False
    try:
        perturb(perturbation, list(unperturbed.messages), seed=perturbation_seed(seed, item.id, perturbation),
                pool=[], gold=item.answer)
    except PerturbationNotApplicable:
        return True
    except ValueError:
        return False
    return False


def finished_records(prepared: Prepared, position: int) -> int | None:
    """The number of records of manifest model `position`'s part of the grid when all of them are already done in the
    results file with its current options (see the module docstring); None when it must be launched (always when
    the grid rejudges)."""
    grid, entry, manifest = prepared.grid, prepared.grid.models[position], prepared.manifests[position]
    results = grid.out
    if entry.source.manifest is None or grid.rejudge or not results.is_file() or results.stat().st_size == 0:
        return None
    from userturn.core.resume_index import scan_results
    from userturn.orchestrate.run_builder import preview
    from userturn.serve.manifest import load_manifest

    if manifest is None:
        manifest = load_manifest(str(entry.source.manifest))  # fails naming the problem
    model = entry.model or manifest.request_model_name
    _, options = preview(entry.source, entry.layers, manifest)
    groups = planned_groups(model, grid, prepared.datasets, options.temperatures, options.samples)
    index = scan_results(results)
    if not groups or index.torn_tail:
        return None
    records: dict[str, ProbeRecord] | None = None
    keys: list[str] = []
    for (dataset, item_id, mode, perturbation), (item, group) in groups.items():
        done = [key in index.ok for key in group]
        if all(done):
            keys += group
            continue
        unperturbed = groups.get((dataset, item_id, mode, "none"))
        if any(done) or unperturbed is None:
            return None
        records = _records(results) if records is None else records
        if not _not_applicable(item, perturbation, records.get(unperturbed[1][0]), options.seed):
            return None
    if not keys:
        return None
    for config in index.ok_configs.values():
        if config.get("model") != model:
            continue
        wanted = options.recorded(assistant_by_model=config.get("assistant_source") == "model")
        unset = [name for name in sampler_names() if getattr(options, name) is None]  # sent at the engine's neutral
        if any(config.get(name) != value for name, value in wanted.items() if name not in unset) or any(
                config.get(name) is not None and not is_neutral(name, config[name]) for name in unset):
            return None  # other settings: the probe's resume check names them
    if grid.judge_models and not _all_labelled(records if records is not None else _records(results), set(keys)):
        return None
    return len(keys)


def _records(results: Path) -> dict[str, ProbeRecord]:
    from userturn.core.results_files import read_results

    return read_results([results])[0]


def _all_labelled(records: dict[str, ProbeRecord], keys: set[str]) -> bool:
    """Whether the current record of every key carries a label or a settled judgement (none to retry)."""
    return all(key in records and records[key].label is not None and records[key].judge_status != "error"
               for key in keys)
