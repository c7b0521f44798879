"""Experiments as files: a YAML grid of models x datasets x modes (x temperatures, samples, perturbations)
run into one resumable results file, `<out_dir>/<name>/results.jsonl`, then reported.

Models are serving manifests (launched for the duration, see `serve`) or plain endpoints. Every model x
dataset x mode is one `client.pipeline.ProbeRun` appending to the same file; rerunning skips records that
are already `ok`, so an interrupted experiment resumes where it stopped.
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from userturn.client.dataset import DatasetItem
from userturn.client.perturb import PERTURBATIONS
from userturn.errors import UserError

Mode = Literal["raw", "chat"]
RESUME_HINT = "use another --out-dir or experiment name"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelEntry(_Strict):
    """A model: a serving manifest (path relative to the experiment file), or an endpoint."""

    manifest: str | None = Field(default=None, description="serving manifest YAML (launched for the run)")
    base_url: str | None = Field(default=None, description="OpenAI-compatible base URL, e.g. http://host:8000/v1")
    model: str | None = Field(default=None, description="model name sent in requests (endpoint models)")
    tokenizer: str | None = Field(default=None, description="tokenizer with the chat template (raw mode)")
    chat_template: str | None = None
    enable_thinking: bool | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: int | None = Field(default=None, ge=1, description="overrides the experiment's max_tokens")
    send_stop_token_ids: bool | None = None
    launcher: Literal["local", "slurm"] | None = Field(default=None, description="overrides the experiment's")

    @model_validator(mode="after")
    def _one_kind(self) -> ModelEntry:
        if self.manifest is None and (self.base_url is None or self.model is None):
            raise ValueError("give either `manifest`, or `base_url` and `model`")
        if self.manifest is not None and self.base_url is not None:
            raise ValueError("give `manifest` or `base_url`, not both")
        return self

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
    """One judge of the panel (see judges.llm_judge.JudgeConfig for all fields).

    `model: self` judges with the model under test on its own endpoint (the report flags it self-judged);
    `model: rules` alone labels with the deterministic rules only (no judge model; other records stay unjudged).
    """

    model: str
    base_url: str | None = Field(default=None, description="judge endpoint; not needed for `model: self`")
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = Field(default=4096, ge=16)
    concurrency: int = Field(default=16, ge=1)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _endpoint_known(self) -> JudgeEntry:
        if self.model not in ("self", "rules") and not self.base_url:
            raise ValueError("a judge needs `base_url` (or `model: self` to judge with the model under test, "
                             "or `model: rules` for the rules alone)")
        return self


class Experiment(_Strict):
    """The whole grid. Unknown keys are errors (typos must not silently change an experiment)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="run directory name")
    description: str | None = None
    models: list[ModelEntry] = Field(min_length=1)
    datasets: list[DatasetEntry] = Field(min_length=1)
    temperatures: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    samples: int = Field(default=1, ge=1)
    perturbations: list[str] = Field(default_factory=lambda: ["none"], min_length=1)
    modes: list[Mode] = Field(default_factory=lambda: ["raw"], min_length=1)
    assistant_from: Literal["dataset", "model", "auto"] = "auto"
    assistant_samples: int = Field(default=1, ge=1, description=">1: N sampled assistant turns per query (rerank)")
    assistant_temperature: float = Field(default=0.0, ge=0)
    assistant_max_tokens: int = Field(default=1024, ge=1)
    max_tokens: int = Field(default=256, ge=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int = 0
    limit: int | None = Field(default=None, ge=1, description="default per-dataset limit")
    shuffle_seed: int | None = None
    concurrency: int = Field(default=64, ge=1)
    request_timeout: float = Field(default=300.0, gt=0)
    max_retries: int = Field(default=5, ge=0)
    judges: list[JudgeEntry] = Field(default_factory=list)
    allow_special_tokens: bool = Field(default=False, description="probe (and flag) items holding special tokens")
    out_dir: str = Field(default="runs", description="parent of the run directory (relative to the cwd)")
    launcher: Literal["local", "slurm"] = Field(default="local", description="where manifest servers run")

    @field_validator("datasets", mode="before")
    @classmethod
    def _dataset_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"spec": v} if isinstance(v, str) else v for v in value]
        return value

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
            values = getattr(self, field)
            if len(set(values)) != len(values):
                raise ValueError(f"{field}: repeated values {values}")
        if self.assistant_samples > 1:
            if self.assistant_from == "dataset":
                raise ValueError("assistant_samples > 1 needs assistant_from: model")
            if self.assistant_temperature == 0:
                raise ValueError("assistant_samples > 1 needs assistant_temperature > 0 (greedy answers are equal)")
        return self


def _describe(path: Path, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "experiment"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{len(exc.errors()) - 3} more)" if len(exc.errors()) > 3 else ""
    return f"{path}: " + "; ".join(parts) + more


def load_experiment(path: str | Path) -> tuple[Experiment, Path]:
    """Parse and validate an experiment file -> (experiment, its directory). Errors name the file and key."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"experiment file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}{where}: invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of settings at the top level")
    try:
        return Experiment.model_validate(data), path.parent
    except ValidationError as exc:
        raise UserError(_describe(path, exc)) from None


@dataclass(frozen=True)
class Unit:
    """One `ProbeRun`: a model on a dataset in one mode."""

    model_index: int
    dataset_index: int
    mode: Mode


def plan(exp: Experiment) -> list[Unit]:
    """The grid in run order: per model (one server launch), every dataset, every mode."""
    return [Unit(m, d, mode) for m, d, mode in itertools.product(
        range(len(exp.models)), range(len(exp.datasets)), exp.modes)]


def planned_records(exp: Experiment, items_per_dataset: list[int]) -> int:
    per_item = len(exp.temperatures) * exp.samples * len(exp.perturbations) * exp.assistant_samples
    return len(exp.models) * len(exp.modes) * per_item * sum(items_per_dataset)


def check_files(exp: Experiment, source: Path) -> None:
    """Every manifest the experiment names exists (an error names the file and key)."""
    for index, entry in enumerate(exp.models):
        if entry.manifest is not None and not (source.parent / entry.manifest).is_file() \
                and not Path(entry.manifest).is_file():
            raise UserError(f"{source}: models.{index}.manifest: file not found: {entry.manifest}")


def resolve(base: Path, value: str | None) -> str | None:
    """A path relative to the experiment file (absolute paths, hub ids and names are left alone)."""
    if value is None:
        return None
    candidate = base / value
    return str(candidate) if not Path(value).is_absolute() and candidate.exists() else value


def load_items(entry: DatasetEntry, exp: Experiment, base: Path,
               ) -> tuple[str, list[DatasetItem], list[DatasetItem] | None]:
    """(recorded name, the items to probe, every item of the dataset when `swap` is planned: its partners come
    from the whole dataset, so `limit` and `shuffle_seed` never change them)."""
    from userturn.cli_probe import load_items as load_spec
    from userturn.client.loaders import parse_spec

    builtin, _ = parse_spec(entry.spec)
    spec = entry.spec if builtin is not None else (resolve(base, entry.spec) or entry.spec)
    name, items, every = load_spec(spec, limit=entry.limit or exp.limit,
                                   shuffle_seed=entry.shuffle_seed if entry.shuffle_seed is not None
                                   else exp.shuffle_seed, whole="swap" in exp.perturbations)
    return entry.name or name, items, every


def assistant_source(entry: DatasetEntry, exp: Experiment, items: list[DatasetItem]) -> Literal["dataset", "model"]:
    choice = entry.assistant_from or exp.assistant_from
    if exp.assistant_samples > 1:
        return "model"
    if choice == "auto":
        return "dataset" if all(i.ends_with_assistant for i in items) else "model"
    return choice


def expand_assistant_samples(items: list[DatasetItem], n: int) -> list[DatasetItem]:
    """N copies of each item (ids `<id>#a<j>`, meta query_id/assistant_sample) so the model answers each
    query N times with different seeds; `userturn rerank` groups them back by query_id."""
    if n == 1:
        return items
    out = []
    for item in items:
        for j in range(n):
            meta = {**(item.meta or {}), "query_id": item.id, "assistant_sample": j}
            out.append(item.model_copy(update={"id": f"{item.id}#a{j}", "meta": meta}))
    return out


def write_manifest(run_dir: Path, exp: Experiment, source: Path) -> None:
    """Keep the resolved experiment next to its results (provenance of the run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    payload = {"source": str(source), "experiment": exp.model_dump(mode="json")}
    (run_dir / "experiment.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def model_args(entry: ModelEntry, exp: Experiment, base: Path, launcher: str | None = None) -> argparse.Namespace:
    """The flags `client.cli_probe.serving` reads, for one model entry (its launcher, else `launcher`, else the
    experiment's)."""
    return argparse.Namespace(
        manifest=resolve(base, entry.manifest), base_url=[entry.base_url] if entry.base_url else None,
        model=entry.model, api_key_env=entry.api_key_env,
        launcher=(entry.launcher or launcher or exp.launcher) if entry.manifest else None,
    )


def _panel(exp: Experiment, server: dict[str, Any], rejudge: bool = False) -> Any:
    """The judge panel for one served model; `model: self` entries point at that model's own endpoint."""
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
            fields.update(model=server["model"], base_url=server["base_urls"][0])
        configs.append(JudgeConfig(**fields, request_timeout=exp.request_timeout, max_retries=exp.max_retries))
    return JudgePanel(PanelConfig(judges=configs, rejudge=rejudge))


def results_path(exp: Experiment, out_dir: str | None = None) -> Path:
    """`<out_dir>/<name>/results.jsonl`."""
    return Path(out_dir or exp.out_dir) / exp.name / "results.jsonl"


async def run_experiment(exp: Experiment, base: Path, source: Path, *, out_dir: str | None = None,
                         progress: bool = True, rejudge: bool = False,
                         launcher: str | None = None) -> tuple[Path, list[Any]]:
    """Run the whole grid into `<out_dir>/<name>/results.jsonl`; returns (results path, run summaries)."""
    from userturn.cli_probe import build_renderer, merged_template_kwargs, pipeline_hooks, serving
    from userturn.client import scoring
    from userturn.client.endpoint import Endpoint, EndpointConfig
    from userturn.client.pipeline import ProbeRun, ProbeSettings
    from userturn.resume_index import scan_results

    results = results_path(exp, out_dir)
    run_dir = results.parent
    datasets = [load_items(entry, exp, base) for entry in exp.datasets]  # before any server starts
    names = [name for name, _, _ in datasets]
    if len(set(names)) != len(names):
        raise UserError(f"{source}: datasets: two datasets are recorded as the same name ({names}); set `name`")
    for name, items, _ in datasets:
        scoring.preflight(name, items)
    write_manifest(run_dir, exp, source)
    summaries: list[Any] = []
    for entry in exp.models:
        with serving(model_args(entry, exp, base, launcher)) as server:
            panel = _panel(exp, server, rejudge)
            try:
                if panel is not None:
                    await panel.check()
                defaults = server["probe"]
                renderer = None
                enable_thinking = (entry.enable_thinking if entry.enable_thinking is not None
                                   else defaults.get("enable_thinking"))
                template_kwargs = merged_template_kwargs(defaults.get("chat_template_kwargs"), enable_thinking)
                if "raw" in exp.modes:
                    renderer = build_renderer(entry.tokenizer or defaults.get("tokenizer"),
                                              entry.chat_template or defaults.get("chat_template"),
                                              enable_thinking, template_kwargs)
                endpoints = [Endpoint(EndpointConfig(base_url=url, api_key_env=server["api_key_env"],
                                                     request_timeout=exp.request_timeout,
                                                     max_retries=exp.max_retries, concurrency=exp.concurrency))
                             for url in server["base_urls"]]
                try:
                    for endpoint in endpoints:
                        await endpoint.check()
                    runs = []
                    for (name, items, every), dataset in zip(datasets, exp.datasets, strict=True):
                        probe_items = expand_assistant_samples(items, exp.assistant_samples)
                        pool = expand_assistant_samples(every, exp.assistant_samples) if every is not None else None
                        for mode in exp.modes:
                            settings = ProbeSettings(
                                model=server["model"], dataset=name, temperatures=exp.temperatures,
                                samples=exp.samples, max_tokens=entry.max_tokens or exp.max_tokens, seed=exp.seed,
                                top_p=exp.top_p, perturbations=exp.perturbations, mode=mode,
                                assistant_from=assistant_source(dataset, exp, items),
                                assistant_temperature=exp.assistant_temperature,
                                assistant_max_tokens=exp.assistant_max_tokens,
                                send_stop_token_ids=bool(entry.send_stop_token_ids
                                                         if entry.send_stop_token_ids is not None
                                                         else defaults.get("send_stop_token_ids")),
                                extra_body=dict(defaults.get("extra_body") or {}),
                                extra_stop=list(defaults.get("stop") or []),
                                extra_stop_token_ids=list(defaults.get("stop_token_ids") or []),
                                concurrency=exp.concurrency,
                                template_kwargs=template_kwargs if mode == "raw" else {},
                                record_meta=dict(defaults.get("record_meta") or {}),
                            )
                            runs.append(ProbeRun(
                                probe_items, settings, endpoints=endpoints,
                                renderer=renderer if mode == "raw" else None, out_path=str(results), judge=panel,
                                progress=progress, progress_title=f"{exp.name}: {server['model']} on {name} ({mode})",
                                swap_pool=pool, resume_hint=RESUME_HINT,
                                allow_special_tokens=exp.allow_special_tokens, **pipeline_hooks()))
                    existing = scan_results(results)
                    for run in runs:  # every run of this model is checked before any of them writes
                        run.check_resume(existing)
                    for run in runs:
                        summaries.append(await run.run())
                finally:
                    for endpoint in endpoints:
                        await endpoint.aclose()
            finally:
                if panel is not None:
                    await panel.aclose()
    return results, summaries


SHOWN_TURNS = 8  # generated turns printed under the report (all of them: `userturn show RESULTS`)


def print_report(results: Path) -> None:
    """The follow-up / accuracy table of the results file (split by model, dataset, mode, perturbation, T)."""
    from rich.console import Console

    from userturn.judges.report import load_results, summarise
    from userturn.judges.report_table import groups_table

    console = Console()
    if not console.is_terminal:
        console = Console(width=220)
    records = load_results(results)
    groups = summarise(records)
    console.print(groups_table(groups, f"userturn report: {results}"))
    from userturn.client.show import turns_table

    console.print(turns_table(records, limit=SHOWN_TURNS, title="generated user turns"))
    unjudged, total = sum(g.unjudged for g in groups), sum(g.records for g in groups)
    if unjudged:
        console.print(f"labelled by: {', '.join(sorted({j for g in groups for j in g.judges})) or 'rules only'}; "
                      f"{unjudged} of {total} records are unjudged (no rule fired and no judge model labelled "
                      "them), so each rate counts only the labelled records. For real numbers add a judge model: "
                      f"userturn judge {results} --judge-base-url URL --judge-model NAME (or `judges:` in the "
                      "experiment file).", soft_wrap=True)
    console.print(f"(full report with judge agreement and plots: userturn report {results})")
