"""Results files as pandas data frames, for notebooks: `records_df` (one row per current record) and `rows_df` (the
report's rows, the numbers `userturn report --json` prints).

Both read the files and folders named as every command does (`userturn.core.results_files`: a folder stands for
its `*.jsonl` files, a judged copy read in place of its source): `records_df` through `read_results` (the last
line per key; configuration lines and superseded lines are no rows), `rows_df` through the report's own
computation (`userturn.report.summary.summarise_file`). pandas is imported here only, on first call.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord
from userturn.core.results_files import read_results, results_files
from userturn.core.taxonomy import is_followup
from userturn.report.filters import row_order
from userturn.report.summary import GroupSummary, summarise_file, to_json_rows

PathsLike = str | Path | Sequence[str | Path]
HUMAN_TURN = "second_turn"  # meta key of the dataset's human-written next user turn (MT-Bench)

RECORD_COLUMNS: tuple[str, ...] = (
    "model", "dataset", "mode", "item_id", "perturbation", "temperature", "sample", "seed", "status", "error",
    "query", "assistant", "user_turn", "human_turn", "finish_reason", "label", "genuine_followup", "label_source",
    "judge_status", "judge_panel", "judges", "judge_errors", "correct", "reference_answer", "task_scores",
    "prompt_tokens", "completion_tokens", "total_tokens", "latency_s", "attempts", "perturbation_detail",
    "assistant_source", "config_fingerprint", "prompt_sha256", "key", "messages", "meta",
)


def _pandas() -> Any:
    try:
        import pandas  # type: ignore[import-untyped]
    except ImportError:
        raise UserError("records_df and rows_df need pandas: pip install 'userturn[cpu]' (or pandas)") from None
    return pandas


def _last(record: ProbeRecord, role: str) -> str | None:
    return next((m.content for m in reversed(record.messages) if m.role == role), None)


def record_row(record: ProbeRecord) -> dict[str, Any]:
    """One record as a flat row (`RECORD_COLUMNS`): the query (last user message probed), the assistant turn it was
    probed with (after the perturbation), the generated turn, the human's next turn where the dataset has one, the
    label and whether it counts as a genuine follow-up (None when unlabelled), the judges asked and those that
    failed, task accuracy, usage."""
    usage = record.usage
    human = (record.meta or {}).get(HUMAN_TURN)
    return {
        "model": record.model, "dataset": record.dataset, "mode": record.mode, "item_id": record.item_id,
        "perturbation": record.perturbation, "temperature": record.temperature, "sample": record.sample,
        "seed": record.seed, "status": record.status, "error": record.error,
        "query": _last(record, "user"), "assistant": _last(record, "assistant"), "user_turn": record.user_turn,
        "human_turn": human if isinstance(human, str) else None, "finish_reason": record.finish_reason,
        "label": record.label, "genuine_followup": None if record.label is None else is_followup(record.label),
        "label_source": record.label_source, "judge_status": record.judge_status, "judge_panel": record.judge_panel,
        "judges": [v.judge for v in record.judges],
        "judge_errors": [v.judge for v in record.judges if v.status != "ok"],
        "correct": record.correct, "reference_answer": record.reference_answer, "task_scores": record.task_scores,
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "completion_tokens": usage.completion_tokens if usage else None,
        "total_tokens": usage.total_tokens if usage else None, "latency_s": record.latency_s,
        "attempts": record.attempts, "perturbation_detail": record.perturbation_detail,
        "assistant_source": record.assistant_source, "config_fingerprint": record.config_fingerprint,
        "prompt_sha256": record.prompt_sha256, "key": record.key,
        "messages": [m.model_dump() for m in record.messages], "meta": record.meta,
    }


def records_df(paths: PathsLike) -> Any:
    """One row per current record of the results files or folders `paths` (read as one): no configuration lines,
    no superseded lines; a `pandas.DataFrame`. Columns: `RECORD_COLUMNS` (see `record_row`); `temperature` float,
    `sample` int, token counts nullable integers, `correct` and `genuine_followup` nullable booleans."""
    pd = _pandas()
    records, _ = read_results(results_files(paths))
    frame = pd.DataFrame([record_row(r) for r in records.values()], columns=list(RECORD_COLUMNS))
    return frame.astype({"temperature": "float64", "sample": "int64", "seed": "int64", "attempts": "int64",
                         "prompt_tokens": "Int64", "completion_tokens": "Int64", "total_tokens": "Int64",
                         "correct": "boolean", "genuine_followup": "boolean"})


def report_rows(paths: PathsLike) -> list[GroupSummary]:
    """The report's rows of the results files or folders `paths`, as `userturn report` computes and orders them."""
    return row_order(summarise_file(results_files(paths)).groups)


def rows_df(paths: PathsLike) -> Any:
    """The report's rows (one per model x dataset x mode x perturbation x temperature x configuration x judge
    panel) with the fields and numbers of `userturn report --json`, in its order; a `pandas.DataFrame`."""
    pd = _pandas()
    rows = to_json_rows(report_rows(paths))
    return pd.DataFrame(rows, columns=list(GroupSummary.model_fields))
