"""GSM8K (openai/gsm8k, config `main`): grade-school math word problems with a numeric final answer.

Each item is the question plus the reference solution as the assistant turn: the calculator annotations
(`<<48/2=24>>`) are removed and the final `#### N` line becomes "The answer is N." `answer` is N.
"""

from __future__ import annotations

import re
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.loaders.base import BuiltinDataset, HubSource, RowError, build_item, require

CALCULATOR = re.compile(r"<<[^<>]*>>")
FINAL = re.compile(r"^\s*####\s*(?P<answer>.+?)\s*$", re.MULTILINE)


def split_solution(solution: str) -> tuple[str, str]:
    """(readable solution ending in 'The answer is N.', N) from a GSM8K answer field."""
    match = FINAL.search(solution)
    if match is None:
        raise RowError("answer has no '#### N' final line")
    answer = match.group("answer").replace(",", "").strip()
    body = CALCULATOR.sub("", solution[: match.start()]).strip()
    text = f"{body}\nThe answer is {answer}." if body else f"The answer is {answer}."
    return text, answer


def map_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    question = require(row, "question")
    text, answer = split_solution(require(row, "answer"))
    return build_item(
        id=f"{split}-{index:05d}",
        messages=[{"role": "user", "content": question}, {"role": "assistant", "content": text}],
        answer=answer,
        meta={"scorer": "gsm8k"},
    )


DATASET = BuiltinDataset(
    name="gsm8k",
    summary="GSM8K grade-school math (openai/gsm8k main); reference solution as the assistant turn; scored",
    splits={
        "test": HubSource("openai/gsm8k", "main", "test"),
        "train": HubSource("openai/gsm8k", "main", "train"),
    },
    default_split="test",
    map_row=map_row,
)
