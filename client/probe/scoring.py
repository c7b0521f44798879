"""Task accuracy of the assistant turn: final-number match (`numeric`), normalised text match (`exact`), IFEval
verifiable instructions (`ifeval`); one registry, `SCORERS`.

`score(dataset, item, response, chosen) -> (correct, task_scores)`, (None, None) without a scorer; the scorer is
`item.meta["scorer"]`, else `chosen` (`--scorer`, `scorer:`), else the dataset name (`gsm8k:train` -> gsm8k).
Reasoning is removed first. Light to import (the CLI's parser lists `SCORERS`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from userturn.core.errors import UserError
from userturn.core.text import strip_reasoning

if TYPE_CHECKING:
    from userturn.client.data.dataset import DatasetItem

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


_FRACTION = re.compile(r"\s*(?P<num>-?\d+)\s*/\s*(?P<den>\d+)\s*")
# "35/" right before a found number, "/36" right after one (not part of a date such as 1/2/3 or of 1.5/2)
_NUMERATOR = re.compile(r"(?<![\w/.,])(?P<sign>[-−]?)(?P<num>\d+)[ \t]*/[ \t]*$")
_DENOMINATOR = re.compile(r"[ \t]*/[ \t]*(?P<den>\d+)(?![\w/]|[.,]\d)")


def parse_gold(text: str) -> Fraction | None:
    """A numeric reference answer as an exact value: a number (`parse_number`) or a fraction such as '35/36'."""
    number = parse_number(text)
    if number is not None:
        return Fraction(number)
    fraction = _FRACTION.fullmatch(text.replace("−", "-"))
    if fraction is None or int(fraction.group("den")) == 0:
        return None
    return Fraction(int(fraction.group("num")), int(fraction.group("den")))


def final_value(text: str) -> Fraction | None:
    """The value a response is scored on: `find_final_number`, read as a fraction where that whole number is the
    numerator or the denominator of one written `a/b` ("the probability is 35/36" -> 35/36)."""
    found = find_final_number(text)
    if found is None:
        return None
    value = Fraction(found.value)
    if value.denominator != 1 or text[found.start:found.end].find(".") >= 0:
        return value
    after = _DENOMINATOR.match(text, found.end)
    if after is not None and int(after.group("den")):
        return value / int(after.group("den"))
    before = _NUMERATOR.search(text, 0, found.start)
    if before is not None and value:
        return Fraction(int(before.group("num")) * (-1 if before.group("sign") else 1), abs(value.numerator))
    return value


def score_numeric(item: DatasetItem, response: str) -> Score:
    """The response's final number (`final_value`) equals the item's numeric `answer`, exactly."""
    if item.answer is None:
        return None, None
    reference = parse_gold(item.answer)
    if reference is None:
        raise UserError(f"item {item.id}: reference answer {item.answer!r} is not a number")
    found = final_value(response)
    correct = found is not None and found == reference
    return correct, {"exact_match": float(correct)}


_MARKUP = re.compile(r"[*_`]+")


def normalise_answer(text: str) -> str:
    """Text as `exact` compares it: markdown emphasis and code marks removed, case folded, runs of whitespace one
    space, and surrounding spaces, quotes and end punctuation (`.!?;:`) stripped."""
    return " ".join(_MARKUP.sub("", text).casefold().split()).strip(" .!?;:'\"")


def score_exact(item: DatasetItem, response: str) -> Score:
    """The whole response equals the item's `answer`, both normalised (`normalise_answer`)."""
    if item.answer is None:
        return None, None
    correct = normalise_answer(response) == normalise_answer(item.answer)
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


@dataclass(frozen=True)
class Scorer:
    """A task scorer: `fn(item, response) -> (correct, task_scores)` and what it checks (the `--scorer` help).
    `numeric`: every `answer` it scores must be a number, checked before any request."""

    fn: Callable[[DatasetItem, str], Score]
    checks: str
    numeric: bool = False
    reads_answer: bool = True


SCORERS: dict[str, Scorer] = {
    "numeric": Scorer(score_numeric, "the final number of the response equals `answer` (a number, or a fraction "
                                     "such as 35/36)", numeric=True),
    "exact": Scorer(score_exact, "the whole response equals `answer`, ignoring case, spacing, markdown emphasis "
                                 "and end punctuation"),
    "ifeval": Scorer(score_ifeval, "IFEval's instruction checkers on meta.instruction_id_list and meta.kwargs",
                     reads_answer=False),
    "gsm8k": Scorer(score_numeric, "numeric, under the name the gsm8k dataset gives it", numeric=True),
}


def answer_scorers() -> list[str]:
    """The scorers that read an item's `answer`, each once (an alias such as gsm8k left out)."""
    seen: set[Callable[[DatasetItem, str], Score]] = set()
    names = []
    for name, scorer in SCORERS.items():
        if scorer.reads_answer and scorer.fn not in seen:
            seen.add(scorer.fn)
            names.append(name)
    return names


def scorer_help() -> str:
    """The registry as help text: `name: what it checks; ...`."""
    return "; ".join(f"{name}: {scorer.checks}" for name, scorer in SCORERS.items())


def check_scorer(name: str | None, where: str = "--scorer") -> None:
    """A UserError naming `where` when `name` is not a scorer of the registry."""
    if name is not None and name not in SCORERS:
        raise UserError(f"{where}: unknown scorer {name!r} (choose from {', '.join(SCORERS)})")


def _dataset_scorer(dataset: str) -> str | None:
    """The scorer a dataset's name selects (`gsm8k`, `ifeval:test`), if any."""
    base = dataset.partition(":")[0].strip().lower()
    return base if base in SCORERS else None


def scorer_name(dataset: str, item: DatasetItem, chosen: str | None = None) -> str | None:
    """Which scorer applies: the item's `meta.scorer`, else `chosen` (the run's `scorer` option), else the
    dataset's base name if it names one."""
    name = (item.meta or {}).get("scorer")
    if name is None:
        name = chosen if chosen is not None else _dataset_scorer(dataset)
    if name is not None and name not in SCORERS:
        raise UserError(f"item {item.id}: unknown scorer {name!r} (choose from {', '.join(SCORERS)})")
    return name


def score(dataset: str, item: DatasetItem, response: str, chosen: str | None = None) -> Score:
    """(correct, task_scores) of one assistant response; (None, None) when no scorer applies."""
    name = scorer_name(dataset, item, chosen)
    if name is None:
        return None, None
    return SCORERS[name].fn(item, strip_reasoning(response))


def _scorable(dataset: str, items: Sequence[DatasetItem], chosen: str | None) -> Iterator[DatasetItem]:
    """The items a scorer may apply to; of a file kept on disk only those whose meta names one, unless the run or
    the dataset's name chooses a scorer for all (known from validation: nothing else is parsed)."""
    from userturn.client.data.lazy_dataset import JsonlItems

    if isinstance(items, JsonlItems) and chosen is None and _dataset_scorer(dataset) is None:
        for index in items.scorer_naming():
            yield items[index]
    else:
        yield from items


def preflight(dataset: str, items: Sequence[DatasetItem], chosen: str | None = None) -> None:
    """Fail before any request if a scorer the items need cannot run here, or an item's `answer` is not the number
    a numeric scorer compares (one line naming the item and where it was read)."""
    check_scorer(chosen)
    names = {_dataset_scorer(dataset), chosen}
    for item in _scorable(dataset, items, chosen):
        name = scorer_name(dataset, item, chosen)
        names.add(name)
        if name is not None and SCORERS[name].numeric and item.answer is not None and parse_gold(item.answer) is None:
            where = f"{item.where}: " if item.where else ""
            raise UserError(f"{where}item {item.id}: answer {item.answer!r} is not a number, and the {name} scorer "
                            "compares numbers (give the number, or choose another scorer)")
    if "ifeval" in names:
        _ifeval_registry()
        check_nltk_data()


def unscored_answers(dataset: str, items: Sequence[DatasetItem], chosen: str | None = None) -> tuple[int, str] | None:
    """(how many items carry an `answer` that no scorer scores, the first one's id), or None when there are none."""
    from userturn.client.data.lazy_dataset import JsonlItems

    if chosen is not None or _dataset_scorer(dataset) is not None:
        return None
    if isinstance(items, JsonlItems):
        unscored = items.answering_without_scorer()
        return (len(unscored), items.ids[unscored[0]]) if unscored else None
    ids = [item.id for item in items if item.answer is not None and (item.meta or {}).get("scorer") is None]
    return (len(ids), ids[0]) if ids else None


def unscored_notice(dataset: str, items: Sequence[DatasetItem], chosen: str | None, how: str) -> str | None:
    """The one-line notice for items whose `answer` no scorer reads (`how`: the flag or key that chooses one)."""
    found = unscored_answers(dataset, items, chosen)
    if found is None:
        return None
    count, first = found
    return (f"userturn: {dataset}: {count} of {len(items)} items carry an `answer` (first: item {first!r}) but no "
            f"scorer applies, so they get no task accuracy; choose one with {how} ({', '.join(answer_scorers())})")
