"""Experiment files: a YAML grid of models x datasets x modes (x temperatures, samples, perturbations) run into
one resumable results file, `<out_dir>/<name>/results.jsonl`. Each model x dataset x mode is one `ProbeRun` built
by `run_builder` as `userturn probe` builds it; option layers: model entry > experiment > manifest > default.
"""

from __future__ import annotations

import contextlib
import functools
import json
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from userturn.client.http.keys import VARIABLE
from userturn.client.probe.perturb import PERTURBATIONS
from userturn.core import defaults
from userturn.core.errors import UserError
from userturn.core.files import read_yaml_mapping
from userturn.core.options import Options, ProbeOptions
from userturn.core.shards import Shard
from userturn.core.shipped import resolve_named
from userturn.core.text import did_you_mean
from userturn.orchestrate.grid_spec import Grid, GridDataset, GridModel, named
from userturn.orchestrate.run_builder import Mode, TargetSource


def _variable_name(value: str | None) -> str | None:
    """An environment variable's name; anything else (most likely a key) is refused without being shown."""
    if value is not None and not VARIABLE.match(value):
        raise ValueError("not the name of an environment variable (not shown: it may be a key); export the key in a "
                         "variable and name it here, or put it in a file named by api_key_file")
    return value


KeyVariable = Annotated[str, AfterValidator(_variable_name)]
RESUME_HINT = "use another --out-dir or experiment name"
DEFAULT_OUT_DIR = "runs"  # the parent of run directories when neither --out-dir nor `out_dir:` names one


def known_scorer(value: str | None) -> str | None:
    """`scorer:` checked against the registry (`client.probe.scoring.SCORERS`)."""
    from userturn.client.probe.scoring import SCORERS

    if value is not None and value not in SCORERS:
        raise ValueError(f"unknown scorer {value!r} (choose from {', '.join(SCORERS)})")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelEntry(Options):
    """A model: a serving manifest (path relative to the experiment file), or an endpoint. Any option
    (`userturn.core.options.Options`) set here wins over the experiment's for this model's runs."""

    manifest: str | None = Field(default=None, description="serving manifest YAML (launched for the run)")
    base_url: str | None = Field(default=None, description="OpenAI-compatible base URL, e.g. http://host:8000/v1")
    model: str | None = Field(default=None, description="model name sent in requests (endpoint models)")
    api_key_env: KeyVariable | None = Field(default=None,
                                            description=f"default: the manifest's, else {defaults.API_KEY_ENV}")
    api_key_file: str | None = Field(default=None, description="file holding the key (relative to the cwd)")
    launcher: Literal["local", "slurm"] | None = Field(default=None, description="overrides the experiment's")

    @model_validator(mode="after")
    def _one_kind(self) -> ModelEntry:
        if self.manifest is None and (self.base_url is None or self.model is None):
            raise ValueError("give either `manifest`, or `base_url` and `model`")
        if self.manifest is not None and self.base_url is not None:
            raise ValueError("give `manifest` or `base_url`, not both")
        return self

    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, value: str | None) -> str | None:
        return known_scorer(value)

    @property
    def label(self) -> str:
        return Path(self.manifest).stem if self.manifest else str(self.model)


class DatasetEntry(_Strict):
    """A dataset: built-in `NAME[:split]` or a JSONL path (relative to the experiment file)."""

    spec: str
    name: str | None = Field(default=None, description="name recorded in results (default: from the spec)")
    limit: int | None = Field(default=None, ge=1)
    shuffle_seed: int | None = None
    assistant_from: Literal["dataset", "model", "auto"] | None = None


class JudgeEntry(_Strict):
    """One judge of the panel (fields as in judges.llm_judge.JudgeConfig). `model: self`: the model under test on
    its own endpoint (flagged self-judged); `model: rules` alone: the deterministic rules only."""

    model: str
    base_url: str | None = Field(default=None, description="judge endpoint; not needed for `model: self`")
    api_key_env: KeyVariable = defaults.API_KEY_ENV
    api_key_file: str | None = Field(default=None, description="file holding the key (relative to the cwd)")
    temperature: float = Field(default=defaults.JUDGE_TEMPERATURE, ge=0)
    max_tokens: int = Field(default=defaults.JUDGE_MAX_TOKENS, ge=defaults.MIN_JUDGE_MAX_TOKENS)
    concurrency: int = Field(default=defaults.JUDGE_CONCURRENCY, ge=1)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _endpoint_known(self) -> JudgeEntry:
        if self.model not in ("self", "rules") and not self.base_url:
            raise ValueError("a judge needs `base_url` (or `model: self` to judge with the model under test, "
                             "or `model: rules` for the rules alone)")
        return self


class Experiment(Options):
    """The whole grid; unknown keys are errors. Its options sit below a model entry's, above its manifest's."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="run directory name")
    description: str | None = None
    models: list[ModelEntry] = Field(min_length=1)
    datasets: list[DatasetEntry] = Field(min_length=1)
    perturbations: list[str] = Field(default_factory=lambda: ["none"], min_length=1)
    modes: list[Mode] = Field(default_factory=lambda: ["raw"], min_length=1)  # type: ignore[arg-type]
    assistant_from: Literal["dataset", "model", "auto"] = "auto"
    assistant_samples: int = Field(default=1, ge=1, description=">1: N sampled assistant turns per query (rerank)")
    limit: int | None = Field(default=None, ge=1, description="default per-dataset limit")
    shuffle_seed: int | None = None
    judges: list[JudgeEntry] = Field(default_factory=list)
    out_dir: str | None = Field(default=None, description="parent of the run directory, relative to the experiment "
                                "file (default: runs, in the working directory)")
    launcher: Literal["local", "slurm"] = Field(default="local", description="where manifest servers run")
    gold: list[str] = Field(default_factory=list, description="gold label files (`userturn label`; relative to the "
                                                              "experiment file): the run's report calibrates the "
                                                              "judges on them, as `report --gold`")

    @field_validator("datasets", mode="before")
    @classmethod
    def _dataset_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"spec": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("scorer")
    @classmethod
    def _known_scorer(cls, value: str | None) -> str | None:
        return known_scorer(value)

    @field_validator("perturbations")
    @classmethod
    def _known_perturbations(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in PERTURBATIONS]
        if unknown:
            raise ValueError(f"unknown perturbation {unknown[0]!r} (choose from {', '.join(PERTURBATIONS)})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Experiment:
        for field in ("temperatures", "perturbations", "modes"):
            values = getattr(self, field) or []
            if len(set(values)) != len(values):
                raise ValueError(f"{field}: repeated values {values}")
        if self.assistant_samples > 1:
            if self.assistant_from == "dataset":
                raise ValueError("assistant_samples > 1 needs assistant_from: model")
            for n, m in enumerate(self.models):  # a model entry's own value wins over the experiment's
                t = next((v for v in (m.assistant_temperature, self.assistant_temperature) if v is not None),
                         defaults.ASSISTANT_TEMPERATURE)
                if not t:
                    raise ValueError(f"assistant_samples > 1 needs assistant_temperature > 0 (greedy answers are "
                                     f"equal){f': models.{n} sets 0' if m.assistant_temperature is not None else ''}")
        return self


def _known_keys(loc: Sequence[int | str]) -> list[str]:
    """The keys the mapping at `loc` (an error's location, its last part the key) accepts: Experiment's, a model
    entry's, a dataset's or a judge's."""
    model: type[BaseModel] = Experiment
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        inner = [a for a in typing.get_args(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)] \
            if field is not None else []
        if not inner:
            return []
        model = inner[0]
    return list(model.model_fields)


def _describe(path: Path, exc: ValidationError) -> str:
    """Up to three of the file's errors in one line, each naming its key; an unknown key as the command line names
    an unknown flag, with the likeliest key meant."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "experiment"
        if err["type"] == "extra_forbidden":
            key, where = str(err["loc"][-1]), ".".join(str(p) for p in err["loc"][:-1])
            hint = did_you_mean(key, _known_keys(err["loc"]))
            parts.append(f"{where + ': ' if where else ''}unknown key {key!r}{hint}")
            continue
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{len(exc.errors()) - 3} more)" if len(exc.errors()) > 3 else ""
    return f"{path}: " + "; ".join(parts) + more


def is_posttrain_file(data: dict[str, Any]) -> bool:
    """Whether a parsed experiment file is a post-training one (`base` + `train`: `userturn posttrain`)."""
    return "train" in data and "base" in data and "models" not in data


def load_experiment(path: str | Path) -> tuple[Experiment, Path]:
    """An experiment file or shipped name (`smoke`) -> (experiment, its directory); errors name the file and key."""
    path = resolve_named(path, "experiments")
    data = read_yaml_mapping(path, "experiment file", "settings")
    if is_posttrain_file(data):
        raise UserError(f"{path}: a post-training experiment (base + train): run it with `userturn posttrain {path}`")
    try:
        return Experiment.model_validate(data), path.parent
    except ValidationError as exc:
        raise UserError(_describe(path, exc)) from None


def planned_records(exp: Experiment, items_per_dataset: list[int], options: Sequence[ProbeOptions]) -> int:
    """Records the grid plans, with each model's resolved options (`model_options`)."""
    per_model = sum(len(o.temperatures) * o.samples for o in options)
    return per_model * len(exp.modes) * len(exp.perturbations) * exp.assistant_samples * sum(items_per_dataset)


def model_options(entry: ModelEntry, exp: Experiment, base: Path) -> ProbeOptions:
    """The options one model's runs will use (its manifest read, nothing launched)."""
    from userturn.orchestrate.run_builder import preview

    return preview(target_source(entry, exp, base), [entry.layer(), exp.layer()])[1]


def check_files(exp: Experiment, source: Path) -> None:
    """Every manifest named exists: a file (relative to the experiment file or the cwd) or a shipped name; every gold
    file exists."""
    for index, entry in enumerate(exp.models):
        if entry.manifest is None or (source.parent / entry.manifest).is_file():
            continue
        try:
            resolve_named(entry.manifest, "manifests")
        except UserError:
            raise UserError(f"{source}: models.{index}.manifest: file not found: {entry.manifest}") from None
    for index, gold in enumerate(exp.gold):  # before the run, not after it: its report reads them
        if not Path(from_file(source.parent, gold)).is_file():
            raise UserError(f"{source}: gold.{index}: file not found: {gold} (relative to the experiment file)")


async def check_judges(exp: Experiment, source: Path | None) -> list[str]:
    """`Endpoint.check` on each judge of `judges:` but `self` and `rules`; one line per judge that fails."""
    from userturn.client.http.endpoint import Endpoint, EndpointConfig

    problems = []
    for index, judge in enumerate(exp.judges):
        if judge.model in ("self", "rules") or judge.base_url is None:
            continue
        config = EndpointConfig(base_url=judge.base_url, api_key_env=judge.api_key_env,
                                api_key_file=judge.api_key_file, max_retries=0,
                                request_timeout=exp.request_timeout or defaults.REQUEST_TIMEOUT_S)
        try:
            async with Endpoint(config) as endpoint:
                await endpoint.check(judge.model)
        except UserError as exc:
            problems.append(f"{source}: judges.{index} ({judge.model}): {exc}")
    return problems


def from_file(base: Path, value: str, *, absolute: bool = False) -> str:
    """A path relative to the experiment file (absolute paths, hub ids and names are left alone); `absolute`: the
    found file as an absolute path."""
    candidate = base / value
    if Path(value).is_absolute() or not candidate.exists():
        return value
    return str(candidate.resolve() if absolute else candidate)


def write_manifest(run_dir: Path, exp: Experiment, source: Path) -> None:
    """The resolved experiment beside its results (`experiment.json`), written atomically: shards write it at once."""
    import os
    import tempfile

    run_dir.mkdir(parents=True, exist_ok=True)
    payload = {"source": str(source), "experiment": exp.model_dump(mode="json")}
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=run_dir, prefix=".experiment.", suffix=".json",
                                     delete=False) as fh:
        fh.write(json.dumps(payload, indent=2) + "\n")
    os.chmod(fh.name, 0o644)  # as a plain write would leave it (a temporary file is private)
    os.replace(fh.name, run_dir / "experiment.json")


def target_source(entry: ModelEntry, exp: Experiment, base: Path, launcher: str | None = None) -> TargetSource:
    """Where one model entry's requests go (a manifest's launcher: the entry's, else `launcher`, else the file's)."""
    return TargetSource(
        manifest=None if entry.manifest is None else from_file(base, entry.manifest),
        base_urls=[entry.base_url] if entry.base_url else None, model=entry.model, api_key_env=entry.api_key_env,
        launcher=(entry.launcher or launcher or exp.launcher) if entry.manifest else None,  # type: ignore[arg-type]
        api_key_file=entry.api_key_file)


def grid_of(exp: Experiment, base: Path, source: Path, *, out_dir: str | None = None, launcher: str | None = None,
            shard: Shard | None = None, progress: bool = True, rejudge: bool = False) -> Grid:
    """The grid an experiment file describes (paths relative to its folder; errors name the file and entry)."""
    models = tuple(GridModel(label=entry.label, source=target_source(entry, exp, base, launcher),
                             layers=(entry.layer(), exp.layer()), model=entry.model,
                             where=f"{source}: models.{index} ({entry.label})")
                   for index, entry in enumerate(exp.models))
    datasets = tuple(dataset_of(entry, exp, base) for entry in exp.datasets)
    return Grid(models=models, datasets=datasets, results=results_path(exp, base, out_dir), modes=tuple(exp.modes),
                perturbations=tuple(exp.perturbations), assistant_samples=exp.assistant_samples, shard=shard,
                title=exp.name, source=source, assistant_how="assistant_from: model",
                scorer_how="`scorer:` in the experiment file", resume_hint=RESUME_HINT,
                judges=functools.partial(judge_panel, exp, rejudge=rejudge) if exp.judges else None,
                judge_models=any(judge.model != "rules" for judge in exp.judges), rejudge=rejudge,
                reuse_finished=True, progress=progress,
                on_start=lambda run_dir: write_manifest(run_dir, exp, source))


def dataset_of(entry: DatasetEntry, exp: Experiment, base: Path) -> GridDataset:
    """One dataset entry as the grid takes it: a path relative to the experiment file, the file's defaults."""
    from userturn.client.data.loaders import parse_spec

    builtin, _ = parse_spec(entry.spec)
    return GridDataset(spec=entry.spec if builtin is not None else from_file(base, entry.spec), name=entry.name,
                       limit=entry.limit or exp.limit,
                       shuffle_seed=entry.shuffle_seed if entry.shuffle_seed is not None else exp.shuffle_seed,
                       assistant_from=entry.assistant_from or exp.assistant_from, label=entry.name or entry.spec)


def naming_entry(source: Path, index: int, entry: ModelEntry, failures: list[str] | None = None,
                 ) -> contextlib.AbstractContextManager[None]:
    """A UserError raised for one model of the grid names its entry: `x.yaml: models.1 (name): ...` (`named`)."""
    return named(f"{source}: models.{index} ({entry.label})", failures)


def judge_panel(exp: Experiment, model: str, base_url: str, options: ProbeOptions, rejudge: bool = False) -> Any:
    """The judge panel for one served model (`model: self` on its endpoint), with its request timeout and retries."""
    if not exp.judges:
        return None
    models = [j for j in exp.judges if j.model != "rules"]  # a judge panel runs the rules first anyway
    if not models:
        from userturn.judges.rules_only import RulesOnly

        return RulesOnly()
    from userturn.judges.llm_judge import JudgeConfig
    from userturn.judges.panel import JudgePanel, PanelConfig

    configs = []
    for j in models:
        fields = j.model_dump()
        if j.model == "self":
            fields.update(model=model, base_url=base_url)
        configs.append(JudgeConfig(**fields, request_timeout=options.request_timeout,
                                   max_retries=options.max_retries))
    return JudgePanel(PanelConfig(judges=configs, rejudge=rejudge))


def results_path(exp: Experiment, base: Path, out_dir: str | None = None) -> Path:
    """`<out_dir>/<name>/results.jsonl`: `out_dir` (--out-dir) as given, else the file's `out_dir` relative to the
    file's folder `base`, else `runs` in the working directory."""
    parent = Path(out_dir) if out_dir else base / exp.out_dir if exp.out_dir else Path(DEFAULT_OUT_DIR)
    return parent / exp.name / "results.jsonl"
