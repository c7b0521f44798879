"""CoVal (openai/coval, config `comparisons`): value-sensitive conversations, four candidate answers each.

The assistant turn is the candidate with the best mean `world` rank (`metadata.assessments[].ranking_blocks`,
"A>B>C=D") across annotators (ties: earliest letter; no rankings: the first candidate).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.loaders.base import (
    BuiltinDataset,
    HubSource,
    RowError,
    build_item,
    chat_messages,
    require,
    text_of,
)


def parse_ranking(ranking: str) -> dict[str, int]:
    """'A>B>C=D' -> {'A': 0, 'B': 1, 'C': 2, 'D': 2}."""
    ranks: dict[str, int] = {}
    for position, group in enumerate(ranking.split(">")):
        for letter in group.split("="):
            if letter.strip():
                ranks[letter.strip()] = position
    return ranks


def world_mean_ranks(row: dict[str, Any]) -> dict[str, float]:
    """Mean `world` rank per candidate letter over all assessments that rank it."""
    totals: dict[str, list[int]] = defaultdict(list)
    for assessment in (row.get("metadata") or {}).get("assessments") or []:
        blocks = (assessment or {}).get("ranking_blocks") or {}
        for block in blocks.get("world") or []:
            for letter, rank in parse_ranking((block or {}).get("ranking") or "").items():
                totals[letter].append(rank)
    return {letter: sum(v) / len(v) for letter, v in totals.items()}


def _response_text(response: dict[str, Any]) -> str:
    messages = response.get("messages") or []
    texts = [text_of(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if not texts:
        raise RowError(f"candidate {response.get('response_index')!r} has no assistant message")
    return texts[-1]


def map_row(row: dict[str, Any], index: int, split: str) -> DatasetItem:
    prompt = require(row, "prompt")
    messages = chat_messages(prompt.get("messages") if isinstance(prompt, dict) else prompt)
    if messages[-1]["role"] != "user":
        raise RowError("conversation does not end with a user message")
    responses = [r for r in require(row, "responses") if isinstance(r, dict)]
    if not responses:
        raise RowError("no candidate responses")
    ranks = world_mean_ranks(row)
    letters = [str(r.get("response_index")) for r in responses]
    best = min(range(len(responses)), key=lambda i: (ranks.get(letters[i], float("inf")), letters[i]))
    messages.append({"role": "assistant", "content": _response_text(responses[best])})
    return build_item(
        id=str(require(row, "prompt_id")),
        messages=messages,
        meta={"candidate": letters[best], "world_mean_rank": {k: round(v, 4) for k, v in sorted(ranks.items())}},
    )


DATASET = BuiltinDataset(
    name="coval",
    summary="CoVal value-sensitive conversations (openai/coval comparisons); best world-ranked candidate as "
            "the assistant turn; no scorer",
    splits={"train": HubSource("openai/coval", "comparisons", "train")},
    default_split="train",
    map_row=map_row,
)
