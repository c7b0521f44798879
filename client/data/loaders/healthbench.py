"""HealthBench (openai/healthbench): multi-turn health conversations ending with a user message; the model answers.

Splits pick the hub file: `all` (5,000), `hard`, `consensus`; `ideal` keeps the rows of `all` that have a
physician-written ideal completion (`ideal_completions_data`) and uses it as the assistant turn.
"""

from __future__ import annotations

from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.loaders.base import BuiltinDataset, HubSource, RowError, build_item, chat_messages, require

REPO = "openai/healthbench"
FILES = {
    "all": "2025-05-07-06-14-12_oss_eval.jsonl",
    "hard": "hard_2025-05-08-21-00-10.jsonl",
    "consensus": "consensus_2025-05-09-20-00-46.jsonl",
}


def map_row(row: dict[str, Any], index: int, split: str) -> DatasetItem | None:
    messages = chat_messages(require(row, "prompt"))
    if messages[-1]["role"] != "user":
        raise RowError("conversation does not end with a user message")
    if split == "ideal":
        ideal = (row.get("ideal_completions_data") or {}).get("ideal_completion")
        if not ideal:
            return None
        messages.append({"role": "assistant", "content": ideal})
    return build_item(
        id=str(require(row, "prompt_id")),
        messages=messages,
        meta={"example_tags": list(row.get("example_tags") or []), "rubric_count": len(row.get("rubrics") or [])},
    )


DATASET = BuiltinDataset(
    name="healthbench",
    summary="HealthBench health conversations (openai/healthbench); the model answers (split `ideal`: "
            "physician completions as the assistant turn); no automatic scorer",
    splits={name: HubSource(REPO, None, "train", data_files=FILES["all" if name == "ideal" else name])
            for name in (*FILES, "ideal")},
    default_split="all",
    map_row=map_row,
)
