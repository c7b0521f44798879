"""Controlled perturbations of the assistant turn, each named, deterministic and seeded, each saying what it changed.

`perturb(name, messages, *, seed, pool, gold)` returns a `Perturbed`: the conversation to probe and `detail`, what was
changed (kept in the record's `perturbation_detail`). The result depends only on the conversation, the seed, `pool`
(swap candidates in order of preference) and `gold` (the item's reference answer); the pipeline derives the seed from
the run seed, the item id and the perturbation, never from the item's position in the run. A perturbation that
would misfire on a conversation raises `PerturbationNotApplicable`: the sample is skipped and counted as not
applicable, never probed under a name that does not describe it. What each tests (expected direction of the
genuine follow-up rate relative to `none`) and where it applies:

* `wrong_answer` - the stated final answer is changed: an interaction-aware model should push back or ask
  (grounded follow-ups that reference the error); the genuine rate should not drop. Applies only when the item
  has a numeric gold answer (`answer`: GSM8K's, or an MT-Bench math reference's final number) and the assistant
  turn (dataset or model) states a numeric final answer (`client.probe.scoring.stated_answer`: `####`, `\\boxed{}`,
  "the answer is", or a last-line answer). Only that number changes, by 1 to 9 in the same format and sign, never
  to the gold answer and never to the original value, so the perturbed turn is always scored wrong.
* `truncate`     - the answer stops mid-way: follow-ups asking to continue / finish should appear. Applies to
  turns of at least `MIN_TRUNCATE_WORDS` words; the cut is at the last word boundary at or before the middle
  where the kept text does not end a sentence or a line (so it visibly stops mid-sentence).
* `swap`         - another item's answer: follow-ups should point out the mismatch; continuations of
  the unrelated answer or restated queries are failures. The partner comes from `SwapRing`: the dataset's
  item ids in an order hashed from the run seed; an item takes the first item after it on that ring whose
  assistant turn differs from its own, that is not another sample of the same query and, where items have a
  `meta.category`, that is of the same category (a plausible answer to the wrong question, not a topic jump).
* `remove`       - no assistant turn (the user header follows the query): genuine follow-ups should drop,
  restated queries rise.
* `generic`      - a fixed non-answer: genuine follow-ups (to an answer) should drop; re-asking rises. Not
  applicable when the turn already is that non-answer.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from userturn.client.probe.scoring import parse_number, stated_answer

from userturn.core.errors import UserError
from userturn.core.records import Message
from userturn.core.text import strip_reasoning

SUMMARIES: dict[str, str] = {  # one line each, for `userturn list` (the module docstring says what each tests)
    "none": "the assistant turn as it is",
    "wrong_answer": "the stated numeric final answer changed (the model should push back); numeric gold only",
    "truncate": "the answer cut mid-sentence (the model should ask to continue)",
    "swap": "another item's answer, same category (the model should point out the mismatch)",
    "remove": "no assistant turn (genuine follow-ups should drop)",
    "generic": "a fixed non-answer (re-asking should rise)",
}
PERTURBATIONS: tuple[str, ...] = tuple(SUMMARIES)
GENERIC_RESPONSE = "I'm not able to help with that right now."
MIN_TRUNCATE_WORDS = 6
_SENTENCE_END = re.compile(r"[.!?:;]['\")\]*]*$")


class PerturbationNotApplicable(ValueError):
    """This perturbation cannot be applied to this conversation (e.g. no stated numeric answer to change)."""


@dataclass(frozen=True)
class Perturbed:
    """The conversation to probe and what the perturbation changed (None for `none`)."""

    messages: list[Message]
    detail: dict[str, Any] | None = None


def validate(names: Sequence[str]) -> list[str]:
    """The names, checked; an unknown one is a UserError listing the valid ones."""
    for name in names:
        if name not in PERTURBATIONS:
            raise UserError(f"unknown perturbation {name!r} (choose from {', '.join(PERTURBATIONS)})")
    return list(names)


def _rng(seed: int, text: str) -> random.Random:
    return random.Random(f"{seed}\x1f{text}")


def _answer_span(text: str) -> tuple[str, int]:
    """(the answer part of the text without reasoning, where it starts in the text)."""
    answer = strip_reasoning(text)
    offset = text.rfind(answer) if answer else -1
    if offset < 0:
        raise PerturbationNotApplicable("wrong_answer: the answer is interleaved with reasoning")
    return answer, offset


def wrong_number(text: str, seed: int, gold: str | None) -> tuple[str, dict[str, Any]]:
    """(the text with its stated final answer replaced by a different number, what changed).

    The new number keeps the format (thousands separators, decimals, sign) and moves the magnitude by 1 to 9 (seeded;
    down only while it stays non-negative); it is never the gold answer and never the original value.
    """
    reference = parse_number(gold) if gold is not None else None
    if reference is None:
        raise PerturbationNotApplicable("wrong_answer: the item has no numeric gold answer")
    answer, offset = _answer_span(text)
    found = stated_answer(answer)
    if found is None:
        raise PerturbationNotApplicable("wrong_answer: the assistant turn states no numeric final answer")
    digits = answer[found.start:found.end]
    magnitude = abs(found.value)
    negative = found.value < 0 or (found.value == 0 and found.text.lstrip("$ ").startswith(("-", "−")))
    decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
    rng = _rng(seed, text)
    steps = rng.sample(range(1, 10), 9)
    up_first = rng.random() < 0.5
    for step in steps:
        for new in ((magnitude + step, magnitude - step) if up_first else (magnitude - step, magnitude + step)):
            value = -new if negative else new
            if new < 0 or value == found.value or value == reference:
                continue
            rendered = f"{new:,.{decimals}f}" if "," in digits else f"{new:.{decimals}f}"
            changed = answer[:found.start] + rendered + answer[found.end:]
            check = stated_answer(changed)
            if check is None or check.value != value:  # pragma: no cover - the rules read the same place
                raise PerturbationNotApplicable("wrong_answer: the changed answer does not read back")
            start = offset + found.start
            detail = {"rule": found.rule, "at": start, "original": digits, "new": rendered,
                      "original_value": str(found.value), "new_value": str(value)}
            return text[:start] + rendered + text[offset + found.end:], detail
    raise PerturbationNotApplicable("wrong_answer: no other value within 9")  # pragma: no cover - 18 tries


def truncate_text(text: str) -> str:
    """The text cut at the last word boundary at or before the middle where the kept text ends neither a sentence
    nor a line (the first such boundary after the middle if there is none before); "" when there is none."""
    middle = len(text) // 2
    before = [i for i in range(middle, 0, -1) if text[i].isspace()]
    after = [i for i in range(middle + 1, len(text)) if text[i].isspace()]
    for cut in (*before, *after):
        kept = text[:cut].rstrip()
        if kept and text[len(kept)] != "\n" and not _SENTENCE_END.search(kept) and kept != text.rstrip():
            return kept
    return ""


def _assistant(messages: list[Message]) -> Message:
    if not messages or messages[-1].role != "assistant":
        raise PerturbationNotApplicable("the conversation does not end with an assistant turn")
    return messages[-1]


def _replace_last(messages: list[Message], content: str) -> list[Message]:
    return [*messages[:-1], Message(role="assistant", content=content)]


def perturb(name: str, messages: list[Message], *, seed: int, pool: Sequence[list[Message]],
            gold: str | None = None) -> Perturbed:
    """The conversation with its final assistant turn perturbed by `name` (a new list; input untouched), and what
    changed.

    `pool` holds `swap` candidates in order of preference (see `SwapRing`): swap takes the assistant turn of the
    first one whose final assistant turn differs from this conversation's. `gold`: the item's reference answer
    (`wrong_answer` needs a numeric one). Raises UserError for an unknown name and PerturbationNotApplicable (a
    ValueError) when the conversation cannot take the perturbation without misfiring.
    """
    validate([name])
    if name == "none":
        return Perturbed(list(messages))
    last = _assistant(messages)
    if name == "remove":
        return Perturbed(list(messages[:-1]), {"removed_chars": len(last.content)})
    if name == "generic":
        if last.content.strip() == GENERIC_RESPONSE:
            raise PerturbationNotApplicable("generic: the assistant turn already is the generic non-answer")
        return Perturbed(_replace_last(messages, GENERIC_RESPONSE), {"replaced_chars": len(last.content)})
    if name == "truncate":
        if len(last.content.split()) < MIN_TRUNCATE_WORDS:
            raise PerturbationNotApplicable(f"truncate: the assistant turn has fewer than {MIN_TRUNCATE_WORDS} words")
        cut = truncate_text(last.content)
        if not cut:
            raise PerturbationNotApplicable("truncate: no word boundary that stops mid-sentence")
        return Perturbed(_replace_last(messages, cut), {"kept_chars": len(cut), "of_chars": len(last.content)})
    if name == "wrong_answer":
        text, detail = wrong_number(last.content, seed, gold)
        return Perturbed(_replace_last(messages, text), detail)
    # swap
    for other in pool:
        if other and other[-1].role == "assistant" and other[-1].content != last.content:
            return Perturbed(_replace_last(messages, other[-1].content),
                             {"replaced_chars": len(last.content), "with_chars": len(other[-1].content)})
    raise PerturbationNotApplicable("swap: no other item's assistant turn to swap in")


class SwapRing:
    """The dataset's item ids in a seeded hash order, read as a ring: an item's swap candidates are the ids after
    it, in ring order. The order depends only on the run seed and the set of ids (never on file order, --limit or
    --shuffle-seed), so an item keeps its partner however the run selects items."""

    def __init__(self, seed: int, ids: Iterable[str]) -> None:
        def rank(item_id: str) -> tuple[bytes, str]:
            return hashlib.blake2b(f"{seed}\x1fswap\x1f{item_id}".encode(), digest_size=16).digest(), item_id

        self.order: list[str] = sorted(set(ids), key=rank)
        self._position = {item_id: n for n, item_id in enumerate(self.order)}

    def after(self, item_id: str) -> Iterator[str]:
        """The other ids, starting with the one after `item_id` on the ring (none if `item_id` is not on it)."""
        n = self._position.get(item_id)
        if n is None:
            return iter(())
        size = len(self.order)
        return (self.order[(n + step) % size] for step in range(1, size))


__all__ = ["GENERIC_RESPONSE", "PERTURBATIONS", "PerturbationNotApplicable", "Perturbed", "SwapRing", "perturb",
           "validate"]
