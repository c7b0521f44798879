"""IFEval (google/IFEval): prompts with verifiable formatting instructions; the model answers first.

`meta` carries `instruction_id_list` and `kwargs` (None-valued keys dropped, as the hub stores every
checker's keys in every dict) for scoring with the `if-verifiable` checkers.
"""

from __future__ import annotations

from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.loaders.base import BuiltinDataset, HubSource, RowError, build_item, require


def map_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    instructions = list(require(row, "instruction_id_list"))
    kwargs = require(row, "kwargs")
    if not isinstance(kwargs, list) or len(kwargs) != len(instructions):
        raise RowError("kwargs must be a list with one dict per instruction")
    cleaned = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs]
    return build_item(
        id=str(require(row, "key")),
        messages=[{"role": "user", "content": require(row, "prompt")}],
        meta={"scorer": "ifeval", "instruction_id_list": instructions, "kwargs": cleaned},
    )


DATASET = BuiltinDataset(
    name="ifeval",
    summary="IFEval verifiable instructions (google/IFEval); the model answers; strict/loose accuracy",
    splits={"train": HubSource("google/IFEval", None, "train")},
    default_split="train",
    map_row=map_row,
)
