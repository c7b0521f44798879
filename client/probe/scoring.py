"""Task accuracy of the assistant turn: GSM8K final-number match, IFEval verifiable instructions.

`score(dataset, item, response) -> (correct, task_scores)`, (None, None) without a scorer; the scorer comes from
`item.meta["scorer"]`, else the dataset name (`gsm8k:train` -> gsm8k). Reasoning is removed first.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.lazy_dataset import JsonlItems

from userturn.core.errors import UserError
from userturn.core.text import strip_reasoning

Score = tuple[bool | None, dict[str, float] | None]

# A number with an optional sign and $ (either order), thousands separators and decimals.
NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-−]?)\s?\$?\s?(?P<sign2>[-−]?)(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
)
# Where a response states its final answer; each is tried in this order (see `stated_answer`).
HASHES = re.compile(r"####")
BOXED = re.compile(r"\\boxed\s*\{(?P<inner>[^{}]*)\}")
PHRASE = re.compile(r"\bfinal answer\b(?:\s*(?:is|was|:|=))*|\banswer\b(?:\s*(?:is|was|:|=))+", re.IGNORECASE)
_LEAD = re.compile(r"[ \t]*(?:\*\*[ \t]*)?")  # what may stand between a marker and its number
_BOX_NUMBER = re.compile(r"\s*(?:\\?\$)?\s*(?P<number>[^\s$%\\]+)\s*(?:\\?%)?\s*\.?\s*$")
_NOT_A_CONCLUSION = re.compile(r"^\s*(?:[-*+#|>]|\d+[.)]\s|`{3})")  # list item, heading, table, quote, fence
_ENDS_ON_NUMBER = re.compile(r"(?:\bis|\bwas|\bare|\bequals|=)[ \t]*(?:\*\*)?[ \t]*$", re.IGNORECASE)
_BEFORE_ALONE = ("", " ", "\t", "*", "$")  # a last line's only number stands alone: not in O(1), 20px, v2
_AFTER_ALONE = ("", " ", "\t", "*", ".", ",", "!", "?", ";", ":", "%")
_AFTER_NUMBER = re.compile(r"[ \t]*%?[ \t]*(?:\*\*)?[ \t]*[.!]?[ \t]*$")


@dataclass(frozen=True)
class FinalNumber:
    """The number a response ends on; `start:end` spans its digits (no sign, no $) in the text; `rule` says how it
    was found (`####`, `boxed`, `answer phrase`, `last line`, or `last number` for the scorer's fallback)."""

    value: Decimal
    start: int
    end: int
    text: str
    rule: str = "last number"


def _number_at(match: re.Match[str], offset: int = 0, rule: str = "last number") -> FinalNumber:
    negative = bool(match.group("sign") or match.group("sign2"))
    raw = match.group("digits").replace(",", "") + (match.group("frac") or "")
    value = Decimal(raw)
    return FinalNumber(-value if negative else value, match.start("digits") + offset, match.end() + offset,
                       match.group(0).strip(), rule)


def _number_right_after(text: str, pos: int, rule: str) -> FinalNumber | None:
    """The number starting at `pos` (after spaces and `**`), not glued to a following letter or digit."""
    lead = _LEAD.match(text, pos)
    start = lead.end() if lead else pos
    number = NUMBER.match(text, start)
    if number is None or (number.end() < len(text) and (text[number.end()].isalnum() or text[number.end()] == "_")):
        return None
    return _number_at(number, 0, rule)


def _from_last_line(text: str) -> FinalNumber | None:
    """The number the last non-empty line concludes on, when that line can be a conclusion: not inside a code block,
    not a list item, heading, table row, quote or fence, and not ending like code (`;`, `{`, `}`)."""
    stripped = text.rstrip()
    offset = stripped.rfind("\n") + 1
    line = stripped[offset:]
    if (not line.strip() or stripped[:offset].count("```") % 2 or _NOT_A_CONCLUSION.match(line)
            or line.rstrip().endswith((";", "{", "}"))):
        return None
    numbers = list(NUMBER.finditer(line))
    if len(numbers) == 1:  # the line's only number, and no other digit on it
        only = numbers[0]
        rest = line[:only.start()] + line[only.end():]
        begin = only.start() + len(only.group(0)) - len(only.group(0).lstrip())  # NUMBER may take a space first
        alone = line[begin - 1:begin] in _BEFORE_ALONE and line[only.end():only.end() + 1] in _AFTER_ALONE
        if alone and not any(ch.isdigit() for ch in rest):
            return _number_at(only, offset, "last line")
    if numbers:  # "... is N." / "... = N" ending the line
        last = numbers[-1]
        if _AFTER_NUMBER.fullmatch(line, last.end()) and _ENDS_ON_NUMBER.search(line, 0, last.start()):
            return _number_at(last, offset, "last line")
    return None


def stated_answer(text: str) -> FinalNumber | None:
    """The numeric final answer a response states, or None. The first of these that occurs decides: the last
    `####`, the last `\\boxed{}`, the last answer phrase ("final answer", "answer" + is/was/:/=), else a last line
    that concludes on one number (the rules: docs/perturbations-and-labels.md, "Stated answer"). A number merely
    ending the text does not count (`find_final_number` falls back to it for scoring)."""
    hashes = list(HASHES.finditer(text))
    if hashes:
        return _number_right_after(text, hashes[-1].end(), "####")
    boxes = list(BOXED.finditer(text))
    if boxes:
        box = boxes[-1]
        inner = _BOX_NUMBER.fullmatch(box.group("inner"))
        number = NUMBER.fullmatch(inner.group("number")) if inner else None
        return _number_at(number, box.start("inner") + inner.start("number"), "boxed") if number and inner else None
    phrases = list(PHRASE.finditer(text))
    if phrases:
        return _number_right_after(text, phrases[-1].end(), "answer phrase")
    return _from_last_line(text)


# The scorer's lenient reading when no answer is stated: the first number anywhere after a marker's last hit
# (earlier hits, then the next kind of marker, when a hit has none), as GSM8K scoring always read it.
LENIENT_MARKERS: tuple[re.Pattern[str], ...] = (
    re.compile(r"####\s*(?P<tail>[^\n]*)"),
    re.compile(r"\\boxed\s*\{(?P<tail>[^{}]*)\}"),
    re.compile(r"(?:final answer|answer is|answer:)\s*(?:is)?\s*[:=]?\s*(?P<tail>[^\n]*)", re.IGNORECASE),
)


def find_final_number(text: str) -> FinalNumber | None:
    """The number a response is scored on: its stated answer (`stated_answer`); else the first number after the
    last marker that has one ("The answer is approximately 3" -> 3); else the last number in the text."""
    found = stated_answer(text)
    if found is not None:
        return found
    for marker in LENIENT_MARKERS:
        for hit in reversed(list(marker.finditer(text))):
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
