"""Whether a launched model's part of a grid is finished already, so a resumed `run` with nothing left for it does
not start its server: every planned record in the results file, ok, made with the options the model would run
with now, and labelled or judged when the grid has judges. Anything less (or anything not known without the
server: a perturbation that does not apply to an item leaves its keys missing) launches it as before, and the
probe's own resume decides what is left."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from userturn.core.options import is_neutral, sampler_names
from userturn.core.records import record_key
from userturn.orchestrate.experiment import Experiment, ModelEntry, expand_assistant_samples, target_source


class DatasetPart(Protocol):
    """One dataset of the grid as the grid holds it (`grid._Dataset`)."""

    @property
    def name(self) -> str: ...

    @property
    def items(self) -> Sequence[Any]: ...


def planned_keys(model: str, exp: Experiment, datasets: Sequence[DatasetPart], temperatures: Sequence[float],
                 samples: int) -> list[str]:
    """Every record key one model's runs plan (every item, mode, perturbation, temperature and sample)."""
    return [record_key(model, data.name, item.id, perturbation, t, k, mode)
            for data in datasets for item in expand_assistant_samples(data.items, exp.assistant_samples)
            for mode in exp.modes for perturbation in exp.perturbations for t in temperatures for k in range(samples)]


def finished_records(entry: ModelEntry, exp: Experiment, base: Path, datasets: Sequence[DatasetPart], results: Path,
                     launcher: str | None = None, rejudge: bool = False) -> int | None:
    """The number of records of a manifest model's part of the grid when all of them are already done in `results`
    with its current options (see the module docstring); None when it must be launched (always with `rejudge`)."""
    if entry.manifest is None or rejudge or not results.is_file() or results.stat().st_size == 0:
        return None
    from userturn.core.resume_index import scan_results
    from userturn.orchestrate.run_builder import preview
    from userturn.serve.manifest import load_manifest

    source = target_source(entry, exp, base, launcher)
    model = entry.model or load_manifest(str(source.manifest)).request_model_name
    _, options = preview(source, [entry.layer(), exp.layer()])
    keys = planned_keys(model, exp, datasets, options.temperatures, options.samples)
    index = scan_results(results)
    if not keys or index.torn_tail or any(key not in index.ok for key in keys):
        return None
    for config in index.ok_configs.values():
        if config.get("model") != model:
            continue
        wanted = options.recorded(assistant_by_model=config.get("assistant_source") == "model")
        unset = [name for name in sampler_names() if getattr(options, name) is None]  # sent at the engine's neutral
        if any(config.get(name) != value for name, value in wanted.items() if name not in unset) or any(
                config.get(name) is not None and not is_neutral(name, config[name]) for name in unset):
            return None  # other settings: the probe's resume check names them
    if exp.judges and not _all_labelled(results, set(keys)):
        return None
    return len(keys)


def _all_labelled(results: Path, keys: set[str]) -> bool:
    """Whether the current record of every key carries a label or a settled judgement (none to retry)."""
    from userturn.core.results_files import read_results

    records, _ = read_results([results])
    return all(key in records and records[key].label is not None and records[key].judge_status != "error"
               for key in keys)
