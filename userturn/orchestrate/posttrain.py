"""Post-training experiments (`userturn posttrain FILE`, e.g. `experiments/posttrain.yaml`): split the dataset by
a seeded hash of the item ids, probe and judge the base model on the training items (`base-train/`), export training
rows (`train.jsonl`), train (`model/`), probe both models on the held-out items (`base-held-out/`,
`trained-held-out/`), and write base vs trained with the paired difference and its item-clustered interval
(`report.json`; seconds per stage in `stages.json`). Every stage resumes: a rerun only does what is missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field, ValidationError, model_validator

from userturn.client.train.trainer import TrainSettings
from userturn.core.errors import UserError
from userturn.core.files import read_yaml_mapping
from userturn.core.options import Options
from userturn.core.records import ProbeRecord
from userturn.core.shipped import resolve_named
from userturn.core.taxonomy import FOLLOWUP as GENUINE
from userturn.core.taxonomy import is_followup
from userturn.orchestrate.experiment import JudgeEntry, from_file

ExportFormat = Literal["sft-human", "sft", "preference"]
log = logging.getLogger("userturn")


# A small model on the CPU: sampled, short user turns, two requests at a time with a patient timeout. Under the file's
# own options, above the base manifest's (`probe_options`).
POSTTRAIN_LAYER = Options(temperatures=[1.0], samples=4, max_tokens=48, concurrency=2, request_timeout=600.0)


class PostTrainExperiment(Options):
    """A post-training experiment file; unknown keys are errors, paths are relative to the file. Its options sit
    above `POSTTRAIN_LAYER`, then the base manifest's, then the defaults."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="run directory name")
    description: str | None = None
    base: str = Field(description="serving manifest of the base model")
    dataset: str = Field(description="built-in NAME[:split] or JSONL path: the items to split")
    limit: int | None = Field(default=None, ge=2, description="use the first N items (after shuffle_seed)")
    shuffle_seed: int | None = None
    held_out: int = Field(ge=1, description="items held out for evaluation (never trained on)")
    split_seed: int = 0
    train_samples: int = Field(default=1, ge=1, description="samples per training item (judged for sft/preference)")
    assistant_from: Literal["dataset", "model", "auto"] = "auto"
    judges: list[JudgeEntry] = Field(default_factory=lambda: [JudgeEntry(model="rules")])
    train_data: list[ExportFormat] = Field(default_factory=lambda: list[ExportFormat](["sft-human"]), min_length=1)
    train: TrainSettings
    out_dir: str = "runs"

    def probe_options(self) -> Options:
        """The options both models are probed with: this file's over `POSTTRAIN_LAYER`."""
        return POSTTRAIN_LAYER.merge(self)

    @property
    def temperatures_probed(self) -> list[float]:
        """The temperatures of the held-out comparison."""
        return list(self.probe_options().temperatures or [])

    @model_validator(mode="after")
    def _data_fits_method(self) -> PostTrainExperiment:
        if self.train.method == "dpo" and self.train_data != ["preference"]:
            raise ValueError("train.method dpo trains on preference rows: set train_data: [preference]")
        if self.train.method == "sft" and "preference" in self.train_data:
            raise ValueError("train.method sft trains on sft / sft-human rows, not preference")
        return self


def load_posttrain(path: str | Path) -> tuple[PostTrainExperiment, Path]:
    """A post-training file or shipped name (`posttrain`) -> (experiment, its path); errors name the file and key."""
    path = resolve_named(path, "experiments")
    data = read_yaml_mapping(path, "experiment file", "settings")
    try:
        return PostTrainExperiment.model_validate(data), path
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise UserError(f"{path}: {loc + ': ' if loc else ''}{msg}") from None


def split_items(items: Sequence[Any], held_out: int, seed: int) -> tuple[list[Any], list[Any]]:
    """(training items, held-out items): the `held_out` items first in the order of blake2b(seed, id), so the split
    depends only on the ids and the seed."""
    if held_out >= len(items):
        raise UserError(f"held_out ({held_out}) must leave training items: the dataset selection has {len(items)}")

    def rank(item: Any) -> bytes:
        return hashlib.blake2b(f"{seed}\0{item.id}".encode(), digest_size=16).digest()

    chosen = {item.id for item in sorted(items, key=rank)[:held_out]}
    return [i for i in items if i.id not in chosen], [i for i in items if i.id in chosen]


def _write_items(path: Path, items: Iterable[Any]) -> None:
    path.write_bytes(b"".join(orjson.dumps(item.model_dump(mode="json", exclude_none=True)) + b"\n"
                              for item in items))


class Metric(BaseModel):
    """One metric of base vs trained on the held-out items at one temperature."""

    metric: str
    temperature: float
    base_rate: float | None
    base_n: int
    trained_rate: float | None
    trained_n: int
    items: int
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    note: str | None = None


METRICS: dict[str, str] = {
    GENUINE: "genuine follow-ups / judged records (the paper's metric; needs a judge model)",
    "rule_flagged": "records a deterministic rule labels degenerate (empty, restated query, role leak) / ok records",
    "ended_turn": "turns the model ended itself (end-of-turn stop within max_tokens) / ok records",
}


def _tallies(records: Iterable[ProbeRecord], temperature: float, metric: str) -> dict[Hashable, tuple[int, int]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        if r.status != "ok" or r.temperature != temperature or r.perturbation != "none":
            continue
        if metric == GENUINE:  # over labelled records, as the report counts them
            hit, counted = is_followup(r.label), r.label is not None
        elif metric == "rule_flagged":
            hit, counted = r.label_source == "rule", True
        else:
            hit, counted = r.finish_reason == "stop", True
        if counted:
            counts[r.item_id][0] += int(hit)
            counts[r.item_id][1] += 1
    return {item: (c[0], c[1]) for item, c in counts.items()}


def compare(base: Sequence[ProbeRecord], trained: Sequence[ProbeRecord], temperatures: Sequence[float],
            ) -> list[Metric]:
    """Per temperature and metric: both rates over the items both labelled, trained - base, Newcombe's paired
    interval from item-clustered Wilson intervals (`report.stats.paired_difference`)."""
    from userturn.report.stats import ItemTallies, clustered_rate, paired_difference

    out = []
    for t in temperatures:
        for metric in METRICS:
            tb, tt = (ItemTallies.from_mapping(_tallies(records, t, metric)) for records in (base, trained))
            rb, rt = (clustered_rate(x.followups, x.labelled) for x in (tb, tt))
            diff = paired_difference(tt, tb)
            note = None
            if metric == GENUINE and not any(is_followup(r.label) for r in [*base, *trained]) \
                    and all(r.label_source in (None, "rule") for r in [*base, *trained]):
                note = "no judge model labelled these records (rules only): not measured"
            out.append(Metric(metric=metric, temperature=t, base_rate=rb.rate if rb else None,
                              base_n=rb.n if rb else 0, trained_rate=rt.rate if rt else None,
                              trained_n=rt.n if rt else 0, items=diff.items, delta=diff.delta, ci_low=diff.ci_low,
                              ci_high=diff.ci_high, note=note or diff.reason))
    return out


class Stages:
    """Seconds per stage, written to stages.json after each stage."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        log.info("posttrain: %s ...", name)
        result = fn(*args, **kwargs)
        self.seconds[name] = round(time.monotonic() - started, 1)
        log.info("posttrain: %s done in %.1fs", name, self.seconds[name])
        self.path.write_text(json.dumps({"seconds": self.seconds}, indent=2) + "\n", encoding="utf-8")
        return result


def _probe(cfg: PostTrainExperiment, name: str, manifest: str, items_file: Path, dataset_name: str, samples: int,
           run_dir: Path, source: Path, progress: bool) -> list[ProbeRecord]:
    """Probe one model on one items file into `<run_dir>/<name>/results.jsonl` (resumable), judged inline."""
    from userturn.core.aio import run as run_async
    from userturn.core.jsonl import read_records
    from userturn.orchestrate.experiment import Experiment, grid_of
    from userturn.orchestrate.grid import run_grid
    from userturn.orchestrate.grid_spec import prepare

    exp = Experiment.model_validate({
        **cfg.probe_options().set_values(), "samples": samples,
        "name": name, "models": [{"manifest": manifest}],
        "datasets": [{"spec": str(items_file), "name": dataset_name}], "perturbations": ["none"], "modes": ["raw"],
        "assistant_from": cfg.assistant_from, "judges": [j.model_dump() for j in cfg.judges], "out_dir": str(run_dir),
    })
    prepared = prepare(grid_of(exp, run_dir, source, out_dir=str(run_dir), progress=progress))
    for notice in prepared.notices:
        log.info(notice)
    results, summaries = prepared.grid.out, run_async(run_grid(prepared))
    errors = sum(s.errors for s in summaries)
    if errors:
        raise UserError(f"{results}: {errors} samples failed (see `error` there); rerun to retry them")
    records, _ = read_records(str(results))
    return list(records.values())


def _export(cfg: PostTrainExperiment, records: Sequence[ProbeRecord], train_ids: set[str], out: Path) -> int:
    from userturn.report.export import export_rows

    rows: list[dict[str, Any]] = []
    notes = []
    mine = [r for r in records if r.item_id in train_ids]
    for fmt in cfg.train_data:
        part, stats = export_rows(mine, fmt)
        rows += part
        notes.append(f"{fmt}: {stats.written}")
    if not rows:
        hint = ("" if "sft-human" in cfg.train_data else
                "; with rules only nothing is labelled genuine: add sft-human or a judge model")
        raise UserError(f"export: no training rows from {len(mine)} records ({', '.join(notes)}){hint}")
    data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    if not out.is_file() or out.read_bytes() != data:
        out.write_bytes(data)
    log.info("posttrain: exported %d rows (%s) to %s", len(rows), ", ".join(notes), out)
    return len(rows)


class PostTrainReport(BaseModel):
    """What a post-training run found (also in `report.json`), for the command line to show."""

    title: str
    rows: list[Metric]
    stage_seconds: dict[str, float]
    run_dir: Path


def posttrain_main(path: Path, *, out_dir: str | None = None, progress: bool = True) -> PostTrainReport:
    """Run every stage of the experiment file at `path`; write the comparison (`report.json`) and return it. Stages
    are logged (`userturn` logger) as they start and end."""
    from userturn.client.data.loaders import load_items, parse_spec
    from userturn.client.train.data import EvalSet
    from userturn.client.train.trainer import require_train_extra
    from userturn.orchestrate.training_run import run_train

    cfg, path = load_posttrain(path)
    require_train_extra()  # before any stage: a missing `train` extra stops here, not after the base probes
    here = path.parent
    manifest = from_file(here, cfg.base, absolute=True)
    if not Path(manifest).is_file():
        raise UserError(f"{path}: base: manifest not found: {cfg.base}")
    builtin, _ = parse_spec(cfg.dataset)
    spec = cfg.dataset if builtin is not None else from_file(here, cfg.dataset, absolute=True)
    dataset_name, items, _ = load_items(spec, limit=cfg.limit, shuffle_seed=cfg.shuffle_seed)
    train_items, held_out = split_items(list(items), cfg.held_out, cfg.split_seed)
    run_dir = Path(out_dir or cfg.out_dir) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    train_file, held_file = run_dir / "train-items.jsonl", run_dir / "held-out.jsonl"
    _write_items(train_file, train_items)
    _write_items(held_file, held_out)
    (run_dir / "split.json").write_text(json.dumps({
        "dataset": dataset_name, "split_seed": cfg.split_seed, "held_out": [i.id for i in held_out],
        "train": [i.id for i in train_items]}, indent=2) + "\n", encoding="utf-8")
    stages = Stages(run_dir / "stages.json")
    log.info("posttrain: %s: %d training items, %d held out (%s)", dataset_name, len(train_items), len(held_out),
             run_dir / "split.json")

    base_train = stages.run("probe+judge base (training items)", _probe, cfg, "base-train", manifest, train_file,
                            dataset_name, cfg.train_samples, run_dir, path, progress)
    data_file = run_dir / "train.jsonl"
    stages.run("export", _export, cfg, base_train, {i.id for i in train_items}, data_file)
    held = EvalSet.from_items(f"{dataset_name} held-out ({held_file})", held_out)
    outcome = stages.run("train", run_train, Path(manifest), data_file, cfg.train, run_dir / "model",
                         eval_sets=[held], progress=progress, reuse=True)
    log.info("%s", outcome.summary())
    samples = cfg.probe_options().samples or 1
    base_held = stages.run("probe+judge base (held-out items)", _probe, cfg, "base-held-out", manifest, held_file,
                           dataset_name, samples, run_dir, path, progress)
    trained_held = stages.run("probe+judge trained (held-out items)", _probe, cfg, "trained-held-out",
                              str(outcome.out / "manifest.yaml"), held_file, dataset_name, samples, run_dir,
                              path, progress)
    rows = stages.run("report", compare, base_held, trained_held, cfg.temperatures_probed)
    training = json.loads((outcome.out / "training.json").read_text(encoding="utf-8"))
    report = {
        "experiment": str(path), "dataset": dataset_name, "held_out_items": len(held_out),
        "training_items": len(train_items), "base": training["base"], "trained_model": outcome.model_name,
        "training": outcome.result.model_dump(mode="json", exclude={"losses"}), "data": outcome.data,
        "metrics": [m.model_dump(mode="json") for m in rows], "stage_seconds": stages.seconds,
        "metric_definitions": METRICS,
    }
    (run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return PostTrainReport(title=f"posttrain {cfg.name}: {outcome.model_name} vs base on {len(held_out)} held-out "
                                 f"{dataset_name} items (Δ = trained − base)",
                           rows=rows, stage_seconds=dict(stages.seconds), run_dir=run_dir)
