"""Results files as Inspect eval logs (inspect_ai's own `.eval` format), to read the turns in `inspect view` and count
them with `inspect_ai.analysis.samples_df`.

One log per model x dataset x mode x configuration, the configuration taken without its temperature and
perturbation settings (those become sample metadata to filter on); a configuration of more than `PART_SAMPLES`
records is written as several logs (parts). Each record is one sample: `id` its item, perturbation and temperature
(`q7|wrong_answer|t=1.0`, unique in the log), `epoch` the sample index + 1 (Inspect counts epochs from 1), `input`
the conversation the model saw (after the perturbation, with roles), `messages` that conversation followed by the
generated user turn, `target` the dataset's reference next turn (MT-Bench's human second turn) or "", `output` the
generated user turn. Scores, each with the generated turn as its `answer`: `outcome` on every sample (the label, or
`unjudged`, `judge_failed`, `generation_error`), `label` (the record's label, categorical), `genuine_followup` (1
when the label counts as a genuine follow-up, else 0), and one score per verdict named after its judge (`judge-a`,
`rule:role_leak`). A record without a label has no `label` score; a failed judgement is a verdict score of value
"error" with the judge's error as explanation, and a generation error is the sample's `error`: neither is ever a
label. The log's results hold, per report row (temperature x perturbation), the follow-up rate, interval and counts
that `userturn report` prints for that row. Logs mark their content untrusted (`ViewerConfig(trust_content=False)`):
the viewer shows model-written text as plain text.

The export streams: one pass indexes the current records (`record_refs`), then each log is written through
inspect_ai's own `EvalRecorder` (the writer `inspect eval` uses), a record read, appended and flushed at a time, so
memory holds one flush of samples and one log's summaries, never the records of every log.

inspect_ai is an optional extra (`userturn[inspect]`); only this module imports it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from userturn.core.errors import UserError
from userturn.core.records import ConfigLine, ProbeRecord, key_field
from userturn.core.results_files import configs_of, results_files
from userturn.core.taxonomy import is_followup
from userturn.report.record_refs import RecordReader, RecordRef, index_records
from userturn.report.summary import GroupSummary, summarise_file

ERROR_VALUE = "error"  # a failed verdict's score value: no label is called that
HUMAN_TURN = "second_turn"  # meta key of the dataset's human-written next user turn (MT-Bench)
PART_SAMPLES = 10_000  # samples per log at most: a larger configuration is written as several parts
FLUSH_EVERY = 500  # samples the recorder buffers between writes to the log
_STOP_REASONS = {"stop": "stop", "length": "max_tokens", "content_filter": "content_filter"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _inspect() -> Any:
    try:
        import inspect_ai
    except ImportError:
        raise UserError("--format inspect needs inspect-ai: pip install 'userturn[inspect]'") from None
    import inspect_ai.log
    import inspect_ai.log._recorders.eval
    import inspect_ai.viewer
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


def sample_id(record: ProbeRecord | RecordRef) -> str:
    """The sample's id in its log: item, perturbation and temperature (`q7|wrong_answer|t=1.0`; `%`, `|` and `/`
    percent-encoded). Model, dataset and mode are the log's; the sample index is the epoch."""
    item = key_field(record.item_id).replace("/", "%2F")
    return f"{item}|{key_field(record.perturbation).replace('/', '%2F')}|t={float(record.temperature)!r}"


@dataclass
class LogGroup:
    """The records (as references) and report rows of one log."""

    model: str
    dataset: str
    mode: str
    config: dict[str, Any] | None
    config_line: ConfigLine | None
    refs: list[RecordRef] = field(default_factory=list)
    rows: list[GroupSummary] = field(default_factory=list)


@dataclass
class InspectExport:
    """What `export_inspect` wrote."""

    logs: list[Path]
    samples: int = 0
    labelled: int = 0
    judge_failures: int = 0
    generation_errors: int = 0


def _messages(inspect_ai: Any, record: ProbeRecord) -> list[Any]:
    model = inspect_ai.model
    kinds = {"system": model.ChatMessageSystem, "developer": model.ChatMessageSystem, "user": model.ChatMessageUser,
             "assistant": model.ChatMessageAssistant, "tool": model.ChatMessageUser}
    return [kinds[m.role](content=m.content) for m in record.messages]


def outcome(record: ProbeRecord) -> str:
    """What became of a record, as the `outcome` score says it: its label, else why it has none."""
    if record.status == "error":
        return "generation_error"
    if record.label is not None:
        return record.label
    return "judge_failed" if record.judge_status == "error" else "unjudged"


def _scores(inspect_ai: Any, record: ProbeRecord) -> dict[str, Any]:
    score = inspect_ai.scorer.Score
    turn = record.user_turn
    scores: dict[str, Any] = {"outcome": score(value=outcome(record), answer=turn)}  # first: the viewer's default
    ok = [v for v in record.judges if v.status == "ok"]
    if record.label is not None:
        deciding = next((v for v in ok if v.label == record.label and v.source == "judge"), None) or \
            next((v for v in ok if v.label == record.label), None)
        why = deciding.rationale if deciding else None
        scores["label"] = score(value=record.label, answer=turn, explanation=why,
                                metadata={"label_source": record.label_source, "judge_panel": record.judge_panel})
        scores["genuine_followup"] = score(value=int(is_followup(record.label)), answer=turn, explanation=why)
    for verdict in record.judges:
        name = verdict.judge if verdict.judge not in scores else f"judge:{verdict.judge}"
        if verdict.status == "ok" and verdict.label is not None:
            scores[name] = score(value=verdict.label, answer=turn, explanation=verdict.rationale,
                                 metadata={"source": verdict.source, "status": "ok"})
        else:
            scores[name] = score(value=ERROR_VALUE, answer=turn,
                                 explanation=verdict.error or "the judge gave no usable verdict",
                                 metadata={"source": verdict.source, "status": "error"})
    return scores


def _metadata(record: ProbeRecord) -> dict[str, Any]:
    return {
        "model": record.model, "dataset": record.dataset, "item_id": record.item_id,
        "temperature": record.temperature, "perturbation": record.perturbation, "sample": record.sample,
        "key": record.key, "perturbation_detail": record.perturbation_detail, "seed": record.seed,
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
    conversation = _messages(inspect_ai, record)
    turn = [inspect_ai.model.ChatMessageUser(content=record.user_turn)] if record.user_turn is not None else []
    return inspect_ai.log.EvalSample(
        id=sample_id(record), epoch=record.sample + 1, input=conversation, messages=[*conversation, *turn],
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


def _viewer(inspect_ai: Any) -> Any:
    """Content untrusted (model-written text shown as plain text); the sample list shows id, epoch, input, the turn
    (answer) and the outcome first, sorted by id and epoch, without the timing columns a replayed record lacks."""
    viewer = inspect_ai.viewer
    shown = [viewer.TaskSamplesColumn(id=c) for c in ("sampleStatus", "sampleId", "epoch", "input", "answer")]
    hidden = [viewer.TaskSamplesColumn(id=c, visible=False) for c in ("tokens", "duration", "retries", "limit")]
    view = viewer.TaskSamplesView(
        name="userturn", columns=[*shown, viewer.TaskSamplesColumn.score("outcome"), *hidden],
        sort=[viewer.TaskSamplesSort(column="sampleId"), viewer.TaskSamplesSort(column="epoch")], multiline=True)
    return viewer.ViewerConfig(trust_content=False, task_samples_view=view)


def _spec(inspect_ai: Any, group: LogGroup, refs: list[RecordRef], task_id: str, part: tuple[int, int],
          created: str) -> Any:
    log = inspect_ai.log
    metadata = {"mode": group.mode, "configuration": _log_config(group.config),
                "config_fingerprints": sorted({r.fingerprint or "" for r in refs}),
                "temperatures": sorted({r.temperature for r in refs}),
                "perturbations": sorted({r.perturbation for r in refs}),
                "renderer": group.config_line.renderer.model_dump(mode="json")
                if group.config_line and group.config_line.renderer else None}
    if part[1] > 1:
        metadata["part"] = f"{part[0]} of {part[1]}"
    return log.EvalSpec(
        created=created, task=f"userturn/{group.dataset}", task_id=task_id, run_id=task_id, eval_id=task_id,
        dataset=log.EvalDataset(name=group.dataset, samples=len({r.item_id for r in refs})),
        model=group.model, model_generate_config=_generate_config(inspect_ai, group.config),
        config=log.EvalConfig(epochs=max((r.sample for r in refs), default=0) + 1), metadata=metadata,
        viewer=_viewer(inspect_ai))


def _groups(files: Sequence[Path], refs: list[RecordRef]) -> dict[str, LogGroup]:
    configs = configs_of(files)
    groups: dict[str, LogGroup] = {}
    for ref in refs:
        line = configs.get(ref.fingerprint or "")
        config = line.config if line else None
        identity = log_identity(ref.model, ref.dataset, ref.mode, config)
        group = groups.setdefault(identity, LogGroup(ref.model, ref.dataset, ref.mode, config, line))
        group.refs.append(ref)
    for row in summarise_file(files).groups:
        identity = log_identity(row.model, row.dataset, row.mode, row.config)
        if identity in groups:
            groups[identity].rows.append(row)
    return groups


async def _write_log(inspect_ai: Any, spec: Any, results: Any, refs: list[RecordRef], reader: RecordReader,
                     path: Path, done: InspectExport) -> None:
    """One log through inspect_ai's `EvalRecorder`: samples appended and flushed every `FLUSH_EVERY`."""
    log = inspect_ai.log
    recorder = log._recorders.eval.EvalRecorder(str(path.parent))
    await recorder.log_init(spec, str(path), clean=True)
    await recorder.log_start(spec, log.EvalPlan())
    for n, ref in enumerate(refs, start=1):
        record = reader.read(ref)
        # not condensed (`write_eval_log` condenses): the attachments it makes of repeated text saved nothing after
        # the log's compression here (6.2 MB either way for 5,000 samples) and cost a tenth of the CPU
        await recorder.log_sample(spec, _sample(inspect_ai, record))
        done.samples += 1
        done.labelled += record.label is not None
        done.judge_failures += record.judge_status == "error"
        done.generation_errors += record.status == "error"
        if n % FLUSH_EVERY == 0:
            await recorder.flush(spec)
    await recorder.log_finish(spec, "success", log.EvalStats(started_at=spec.created, completed_at=spec.created),
                              results, None)


async def _export(inspect_ai: Any, files: list[Path], out: Path) -> InspectExport:
    index = index_records(files)
    done = InspectExport(logs=[])
    log = inspect_ai.log
    with RecordReader(index.files) as reader:
        for identity, group in sorted(_groups(files, index.refs).items(),
                                      key=lambda kv: (kv[1].model, kv[1].dataset, kv[0])):
            refs = sorted(group.refs, key=lambda r: (r.perturbation, r.temperature, r.item_id, r.sample))
            rows = sorted(group.rows, key=lambda g: (g.perturbation, g.temperature))
            parts = [refs[i:i + PART_SAMPLES] for i in range(0, len(refs), PART_SAMPLES)]
            run = group.config_line.run if group.config_line else None
            created = run.started if run else datetime.now(UTC).isoformat(timespec="seconds")
            for number, part in enumerate(parts, start=1):
                task_id = identity if len(parts) == 1 else f"{identity}-{number}"
                spec = _spec(inspect_ai, group, part, task_id, (number, len(parts)), created)
                results = log.EvalResults(total_samples=len(part),
                                          completed_samples=sum(r.status == "ok" for r in part),
                                          scores=[_row_score(inspect_ai, row) for row in rows])
                stamp = spec.created[:19].replace(":", "-")
                suffix = f"_part-{number}-of-{len(parts)}" if len(parts) > 1 else ""
                name = _UNSAFE.sub("-", f"{stamp}_{group.model}_{group.dataset}_{group.mode}_{identity}{suffix}")
                path = out / f"{name.strip('-')}.eval"
                await _write_log(inspect_ai, spec, results, part, reader, path, done)
                done.logs.append(path)
    return done


def export_inspect(named: str | Path | Sequence[str | Path], out_dir: str | Path) -> InspectExport:
    """Write one `.eval` log per model x dataset x mode x configuration (in parts of at most `PART_SAMPLES`) of the
    results files or folders `named` (read as one, as every reader does) into `out_dir`; returns what was
    written."""
    inspect_ai = _inspect()
    files = results_files(named)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    export = _export(inspect_ai, files, out)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(export)
    with ThreadPoolExecutor(1) as pool:  # called from a running event loop (a notebook): a loop of its own
        return pool.submit(asyncio.run, export).result()
