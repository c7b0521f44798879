"""Results files as Inspect eval logs (inspect_ai's own `.eval` format), to read the turns in `inspect view` and count
them with `inspect_ai.analysis.samples_df`.

One log per model x dataset x mode x configuration, the configuration taken without its temperature and
perturbation settings (those become sample metadata to filter on). Each record is one sample: `input` the
conversation the model saw (after the perturbation), `target` the dataset's reference next turn (MT-Bench's human
second turn) or "", `output` the generated user turn, `id` the record key, `epoch` the sample index + 1 (Inspect
counts epochs from 1). Scores: `label` (the record's label, categorical), `genuine_followup` (1 when the label counts
as a genuine follow-up, else 0), and one score per verdict named after its judge (`judge-a`, `rule:role_leak`).
A record without a label has no `label` score; a failed judgement is a verdict score of value "error" with the
judge's error as explanation, and a generation error is the sample's `error`: neither is ever a label. The log's
results hold, per report row (temperature x perturbation), the follow-up rate, interval and counts that
`userturn report` prints for that row.

inspect_ai is an optional extra (`userturn[inspect]`); only this module imports it.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from userturn.core.errors import UserError
from userturn.core.records import ConfigLine, ProbeRecord
from userturn.core.results_files import configs_of, read_results, results_files
from userturn.core.taxonomy import is_followup
from userturn.report.summary import GroupSummary, summarise_file

ERROR_VALUE = "error"  # a failed verdict's score value: no label is called that
HUMAN_TURN = "second_turn"  # meta key of the dataset's human-written next user turn (MT-Bench)
_STOP_REASONS = {"stop": "stop", "length": "max_tokens", "content_filter": "content_filter"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _inspect() -> Any:
    try:
        import inspect_ai
    except ImportError:
        raise UserError("--format inspect needs inspect-ai: pip install 'userturn[inspect]'") from None
    import inspect_ai.log
    return inspect_ai


def _log_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """A configuration without the settings that become sample metadata (temperature, perturbation)."""
    if not config:
        return {}
    return {k: v for k, v in config.items() if "perturb" not in k.lower() and not k.lower().startswith("temperature")}


def log_identity(model: str, dataset: str, mode: str, config: dict[str, Any] | None) -> str:
    """12 hex digits naming one log: model, dataset, mode and the configuration less temperature and perturbation."""
    body = orjson.dumps([model, dataset, mode, _log_config(config)], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()[:12]


@dataclass
class LogGroup:
    """The records and report rows of one log."""

    model: str
    dataset: str
    mode: str
    config: dict[str, Any] | None
    config_line: ConfigLine | None
    records: list[ProbeRecord] = field(default_factory=list)
    rows: list[GroupSummary] = field(default_factory=list)


@dataclass
class InspectExport:
    """What `export_inspect` wrote."""

    logs: list[Path]
    samples: int
    labelled: int
    judge_failures: int
    generation_errors: int


def _messages(inspect_ai: Any, record: ProbeRecord) -> list[Any]:
    model = inspect_ai.model
    kinds = {"system": model.ChatMessageSystem, "developer": model.ChatMessageSystem, "user": model.ChatMessageUser,
             "assistant": model.ChatMessageAssistant, "tool": model.ChatMessageUser}
    return [kinds[m.role](content=m.content) for m in record.messages]


def _scores(inspect_ai: Any, record: ProbeRecord) -> dict[str, Any]:
    score = inspect_ai.scorer.Score
    scores: dict[str, Any] = {}
    ok = [v for v in record.judges if v.status == "ok"]
    if record.label is not None:
        deciding = next((v for v in ok if v.label == record.label and v.source == "judge"), None) or \
            next((v for v in ok if v.label == record.label), None)
        why = deciding.rationale if deciding else None
        scores["label"] = score(value=record.label, answer=record.user_turn, explanation=why,
                                metadata={"label_source": record.label_source, "judge_panel": record.judge_panel})
        scores["genuine_followup"] = score(value=int(is_followup(record.label)), answer=record.user_turn,
                                           explanation=why)
    for verdict in record.judges:
        name = verdict.judge if verdict.judge not in scores else f"judge:{verdict.judge}"
        if verdict.status == "ok" and verdict.label is not None:
            scores[name] = score(value=verdict.label, explanation=verdict.rationale,
                                 metadata={"source": verdict.source, "status": "ok"})
        else:
            scores[name] = score(value=ERROR_VALUE, explanation=verdict.error or "the judge gave no usable verdict",
                                 metadata={"source": verdict.source, "status": "error"})
    return scores


def _metadata(record: ProbeRecord) -> dict[str, Any]:
    return {
        "item_id": record.item_id, "temperature": record.temperature, "perturbation": record.perturbation,
        "perturbation_detail": record.perturbation_detail, "sample": record.sample, "seed": record.seed,
        "status": record.status, "judge_status": record.judge_status, "label": record.label,
        "label_source": record.label_source, "finish_reason": record.finish_reason,
        "matched_stop": record.matched_stop, "prompt_sha256": record.prompt_sha256, "correct": record.correct,
        "reference_answer": record.reference_answer, "config_fingerprint": record.config_fingerprint,
        "assistant_source": record.assistant_source, "mode": record.mode,
    }


def _sample(inspect_ai: Any, record: ProbeRecord) -> Any:
    human = (record.meta or {}).get(HUMAN_TURN)
    output = inspect_ai.model.ModelOutput.from_content(
        model=record.model, content=record.user_turn or "",
        stop_reason=_STOP_REASONS.get(record.finish_reason or "", "unknown"))
    error = None
    if record.status == "error":
        error = inspect_ai.log.EvalError(message=record.error or "generation failed", traceback="",
                                         traceback_ansi="")
    return inspect_ai.log.EvalSample(
        id=record.key, epoch=record.sample + 1, input=_messages(inspect_ai, record),
        target=human if isinstance(human, str) else "", output=output, scores=_scores(inspect_ai, record),
        metadata=_metadata(record), error=error)


def _row_score(inspect_ai: Any, row: GroupSummary) -> Any:
    log = inspect_ai.log
    values: dict[str, float | int | None] = {
        "followup_rate": row.followup_rate, "ci_low": row.ci_low, "ci_high": row.ci_high, "n": row.n,
        "followups": row.followups, "items": row.items, "judge_failures": row.judge_failures,
        "generation_errors": row.generation_errors, "unjudged": row.unjudged, "accuracy": row.accuracy,
        "delta_vs_none": row.delta_vs_none}
    metrics = {name: log.EvalMetric(name=name, value=value) for name, value in values.items() if value is not None}
    return log.EvalScore(name=f"T={row.temperature:g} {row.perturbation}", scorer="genuine_followup",
                         metrics=metrics, metadata={"temperature": row.temperature, "perturbation": row.perturbation,
                                                    "judge_panel": row.judge_panel, "settings": row.settings})


def _generate_config(inspect_ai: Any, config: dict[str, Any] | None) -> Any:
    config = config or {}
    fields = {"max_tokens": config.get("max_tokens"), "top_p": config.get("top_p"), "top_k": config.get("top_k"),
              "stop_seqs": config.get("stop") or None}
    return inspect_ai.model.GenerateConfig(**{k: v for k, v in fields.items() if v is not None})


def _log(inspect_ai: Any, group: LogGroup, identity: str) -> Any:
    log = inspect_ai.log
    records = sorted(group.records, key=lambda r: (r.perturbation, r.temperature, r.item_id, r.sample))
    run = group.config_line.run if group.config_line else None
    created = run.started if run else datetime.now(UTC).isoformat(timespec="seconds")
    spec = log.EvalSpec(
        created=created, task=f"userturn/{group.dataset}", task_id=identity, run_id=identity,
        dataset=log.EvalDataset(name=group.dataset, samples=len({r.item_id for r in records})),
        model=group.model, model_generate_config=_generate_config(inspect_ai, group.config),
        config=log.EvalConfig(epochs=max((r.sample for r in records), default=0) + 1),
        metadata={"mode": group.mode, "configuration": _log_config(group.config),
                  "config_fingerprints": sorted({r.config_fingerprint or "" for r in records}),
                  "temperatures": sorted({r.temperature for r in records}),
                  "perturbations": sorted({r.perturbation for r in records}),
                  "renderer": group.config_line.renderer.model_dump(mode="json")
                  if group.config_line and group.config_line.renderer else None})
    rows = sorted(group.rows, key=lambda g: (g.perturbation, g.temperature))
    results = log.EvalResults(total_samples=len(records), completed_samples=sum(r.status == "ok" for r in records),
                              scores=[_row_score(inspect_ai, row) for row in rows])
    return log.EvalLog(eval=spec, status="success", results=results, samples=[_sample(inspect_ai, r) for r in records],
                       stats=log.EvalStats(started_at=created, completed_at=created))


def _groups(files: Sequence[Path]) -> dict[str, LogGroup]:
    records, _ = read_results(files)
    configs = configs_of(files)
    groups: dict[str, LogGroup] = {}
    for record in records.values():
        line = configs.get(record.config_fingerprint or "")
        config = line.config if line else None
        identity = log_identity(record.model, record.dataset, record.mode, config)
        group = groups.setdefault(identity, LogGroup(record.model, record.dataset, record.mode, config, line))
        group.records.append(record)
    for row in summarise_file(files).groups:
        identity = log_identity(row.model, row.dataset, row.mode, row.config)
        if identity in groups:
            groups[identity].rows.append(row)
    return groups


def export_inspect(named: str | Path | Sequence[str | Path], out_dir: str | Path) -> InspectExport:
    """Write one `.eval` log per model x dataset x mode x configuration of the results files or folders `named`
    (read as one, as every reader does) into `out_dir`; returns what was written."""
    inspect_ai = _inspect()
    files = results_files(named)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    counts: dict[str, int] = defaultdict(int)
    for identity, group in sorted(_groups(files).items(), key=lambda kv: (kv[1].model, kv[1].dataset, kv[0])):
        eval_log = _log(inspect_ai, group, identity)
        stamp = eval_log.eval.created[:19].replace(":", "-")
        name = _UNSAFE.sub("-", f"{stamp}_{group.model}_{group.dataset}_{group.mode}_{identity}").strip("-")
        path = out / f"{name}.eval"
        inspect_ai.log.write_eval_log(eval_log, path, format="eval")
        written.append(path)
        counts["samples"] += len(group.records)
        counts["labelled"] += sum(r.label is not None for r in group.records)
        counts["judge_failures"] += sum(r.judge_status == "error" for r in group.records)
        counts["generation_errors"] += sum(r.status == "error" for r in group.records)
    return InspectExport(logs=written, **counts)
