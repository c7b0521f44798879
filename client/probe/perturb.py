"""Controlled perturbations of the assistant turn: named, deterministic, seeded, each saying what it changed.

`perturb(name, messages, *, seed, pool, gold)` returns a `Perturbed`: the conversation to probe and `detail` (the
record's `perturbation_detail`). It depends only on its arguments, never on the item's position in the run. A
perturbation that would misfire on a conversation raises `PerturbationNotApplicable`: the sample is skipped and
counted apart. What each one tests, where it applies and what it changes: README "Perturbations".
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

SUMMARIES: dict[str, str] = {  # one line each, for `userturn list`
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


def wrong_number(text: str, seed: int, gold: str | None) -> tuple[str, dict[str, Any]]:
    """(the text with the magnitude of its stated final answer moved by 1 to 9, seeded, in the same format and sign,
    never to the gold answer; what changed)."""
    reference = parse_number(gold) if gold is not None else None
    if reference is None:
        raise PerturbationNotApplicable("wrong_answer: the item has no numeric gold answer")
    answer = strip_reasoning(text)
    offset = text.rfind(answer) if answer else -1
    if offset < 0:
        raise PerturbationNotApplicable("wrong_answer: the answer is interleaved with reasoning")
    found = stated_answer(answer)
    if found is None:
        raise PerturbationNotApplicable("wrong_answer: the assistant turn states no numeric final answer")
    digits = answer[found.start:found.end]
    magnitude = abs(found.value)
    negative = found.value < 0 or (found.value == 0 and found.text.lstrip("$ ").startswith(("-", "−")))
    decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
    rng = random.Random(f"{seed}\x1f{text}")
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


def _replace_last(messages: list[Message], content: str) -> list[Message]:
    return [*messages[:-1], Message(role="assistant", content=content)]


def perturb(name: str, messages: list[Message], *, seed: int, pool: Sequence[list[Message]],
            gold: str | None = None) -> Perturbed:
    """The conversation (a new list) with its final assistant turn perturbed by `name`, and what changed.

    `pool`: `swap` candidates in order of preference (`SwapRing`); swap takes the first final assistant turn that
    differs from this one. `gold`: the item's reference answer (`wrong_answer` needs a numeric one). Raises UserError
    for an unknown name, PerturbationNotApplicable (a ValueError) where the perturbation would misfire.
    """
    validate([name])
    if name == "none":
        return Perturbed(list(messages))
    if not messages or messages[-1].role != "assistant":
        raise PerturbationNotApplicable("the conversation does not end with an assistant turn")
    last = messages[-1]
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
    """The dataset's item ids in an order hashed from the run seed, read as a ring: an item's swap candidates are
    the ids after it. The order ignores file order, --limit and --shuffle-seed, so an item keeps its partner."""

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
