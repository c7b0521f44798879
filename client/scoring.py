"""Task accuracy of the assistant turn: GSM8K final-number match, IFEval verifiable instructions.

`score(dataset, item, response) -> (correct, task_scores)`; (None, None) where there is no scorer.
The scorer comes from `item.meta["scorer"]` (set by the built-in loaders, or in a local JSONL), else from
the dataset name (`gsm8k`, `gsm8k:train`, `ifeval`, ...). Reasoning (`<think>...</think>`) is removed first.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from userturn.client.dataset import DatasetItem
from userturn.client.lazy_dataset import JsonlItems

from userturn.errors import UserError
from userturn.text import strip_reasoning

Score = tuple[bool | None, dict[str, float] | None]

# A number with an optional sign and $ (either order), thousands separators and decimals.
NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-−]?)\s?\$?\s?(?P<sign2>[-−]?)(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
)
MARKERS: tuple[re.Pattern[str], ...] = (
    re.compile(r"####\s*(?P<tail>[^\n]*)"),
    re.compile(r"\\boxed\s*\{(?P<tail>[^{}]*)\}"),
    re.compile(r"(?:final answer|answer is|answer:)\s*(?:is)?\s*[:=]?\s*(?P<tail>[^\n]*)", re.IGNORECASE),
)


@dataclass(frozen=True)
class FinalNumber:
    """The number a response ends on; `start:end` spans its digits (no sign, no $) in the text."""

    value: Decimal
    start: int
    end: int
    text: str


def _number_at(match: re.Match[str], offset: int = 0) -> FinalNumber:
    negative = bool(match.group("sign") or match.group("sign2"))
    raw = match.group("digits").replace(",", "") + (match.group("frac") or "")
    value = Decimal(raw)
    return FinalNumber(-value if negative else value, match.start("digits") + offset, match.end() + offset,
                       match.group(0).strip())


def find_final_number(text: str) -> FinalNumber | None:
    """The final answer: after the last `####`, in the last `\\boxed{}`, after the last "the answer is",
    else the last number in the text."""
    for marker in MARKERS:
        hits = list(marker.finditer(text))
        for hit in reversed(hits):
            number = NUMBER.search(hit.group("tail"))
            if number is not None:
                return _number_at(number, hit.start("tail"))
    numbers = list(NUMBER.finditer(text))
    return _number_at(numbers[-1]) if numbers else None


def parse_number(text: str) -> Decimal | None:
    """A reference answer such as '1,000', '$5', '-3.50' as a Decimal (None if it is not a number)."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace("−", "-").rstrip(".")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def score_gsm8k(item: DatasetItem, response: str) -> Score:
    if item.answer is None:
        return None, None
    reference = parse_number(item.answer)
    if reference is None:
        raise UserError(f"item {item.id}: reference answer {item.answer!r} is not a number")
    found = find_final_number(response)
    correct = found is not None and found.value == reference
    return correct, {"exact_match": float(correct)}


@functools.cache
def _ifeval_registry() -> tuple[Any, Any]:
    try:
        from if_verifiable.common import evaluate_instructions
        from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
    except ImportError:
        raise UserError("IFEval scoring needs `if-verifiable`: pip install 'userturn[datasets]'") from None
    return evaluate_instructions, INSTRUCTION_DICT


def check_nltk_data() -> None:
    """IFEval's sentence checks need NLTK's punkt_tab data; say how to get it instead of failing mid-run."""
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        raise UserError("IFEval scoring needs NLTK's punkt_tab data: python -m nltk.downloader punkt_tab") from None


def score_ifeval(item: DatasetItem, response: str) -> Score:
    meta = item.meta or {}
    instructions = meta.get("instruction_id_list")
    if not instructions:
        return None, None
    evaluate, registry = _ifeval_registry()
    prompt = next((m.content for m in reversed(item.messages) if m.role == "user"), "")
    try:
        results, scores = evaluate(response, list(instructions), list(meta.get("kwargs") or []), prompt, registry)
    except LookupError:
        check_nltk_data()
        raise
    if not results and response.strip():
        return None, None  # no instruction the checkers know
    task_scores = {
        "prompt_strict": scores.binary_strict,
        "prompt_loose": scores.binary_loose,
        "instruction_strict": scores.partial_strict,
        "instruction_loose": scores.partial_loose,
    }
    return scores.binary_strict == 1.0, task_scores


SCORERS: dict[str, Callable[[DatasetItem, str], Score]] = {"gsm8k": score_gsm8k, "ifeval": score_ifeval}


def _dataset_scorer(dataset: str) -> str | None:
    """The scorer a dataset's name selects (`gsm8k`, `ifeval:test`), if any."""
    base = dataset.partition(":")[0].strip().lower()
    return base if base in SCORERS else None


def scorer_name(dataset: str, item: DatasetItem) -> str | None:
    """Which scorer applies: the item's `meta.scorer`, else the dataset's base name if it has one."""
    name = (item.meta or {}).get("scorer")
    if name is None:
        name = _dataset_scorer(dataset)
    if name is not None and name not in SCORERS:
        raise UserError(f"item {item.id}: unknown scorer {name!r} (choose from {', '.join(SCORERS)})")
    return name


def score(dataset: str, item: DatasetItem, response: str) -> Score:
    """(correct, task_scores) of one assistant response; (None, None) when the dataset has no scorer."""
    name = scorer_name(dataset, item)
    if name is None:
        return None, None
    return SCORERS[name](item, strip_reasoning(response))


def preflight(dataset: str, items: Iterable[DatasetItem]) -> None:
    """Fail before any request if a scorer the items need cannot run here."""
    if isinstance(items, JsonlItems):  # kept on disk: only the items whose meta names one (known from validation)
        names = {_dataset_scorer(dataset)} | {scorer_name(dataset, items[i]) for i in items.scorer_naming()}
    else:
        names = {scorer_name(dataset, item) for item in items}
    if "ifeval" in names:
        _ifeval_registry()
        check_nltk_data()
