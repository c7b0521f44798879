"""Controlled perturbations of the assistant turn, each named, deterministic and seeded.

`perturb(name, messages, *, seed, pool)` returns the conversation to probe. The result depends only on the
conversation, the seed and `pool` (swap candidates in order of preference); the pipeline derives the seed from the
run seed, the item id and the perturbation, never from the item's position in the run. Expected direction of the
genuine follow-up rate relative to `none` (what a perturbation tests):

* `wrong_answer` - the final number is changed: an interaction-aware model should push back or ask
  (grounded follow-ups that reference the error); the genuine rate should not drop.
* `truncate`     - the answer stops mid-way: follow-ups asking to continue / finish should appear.
* `swap`         - another item's answer: follow-ups should point out the mismatch; continuations of
  the unrelated answer or restated queries are failures. The partner comes from `SwapRing`: the dataset's
  item ids in an order hashed from the run seed; an item takes the first item after it on that ring whose
  assistant turn differs from its own (and that is not another sample of the same query).
* `remove`       - no assistant turn (the user header follows the query): genuine follow-ups should drop,
  restated queries rise.
* `generic`      - a fixed non-answer: genuine follow-ups (to an answer) should drop; re-asking rises.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator, Sequence

from userturn.client.scoring import find_final_number

from userturn.errors import UserError
from userturn.records import Message

SUMMARIES: dict[str, str] = {  # one line each, for `userturn list` (the module docstring says what each tests)
    "none": "the assistant turn as it is",
    "wrong_answer": "the final number changed (the model should push back)",
    "truncate": "the answer cut mid-way (the model should ask to continue)",
    "swap": "another item's answer (the model should point out the mismatch)",
    "remove": "no assistant turn (genuine follow-ups should drop)",
    "generic": "a fixed non-answer (re-asking should rise)",
}
PERTURBATIONS: tuple[str, ...] = tuple(SUMMARIES)
GENERIC_RESPONSE = "I'm not able to help with that right now."


class PerturbationNotApplicable(ValueError):
    """This perturbation cannot be applied to this conversation (e.g. no number to change)."""


def validate(names: Sequence[str]) -> list[str]:
    """The names, checked; an unknown one is a UserError listing the valid ones."""
    for name in names:
        if name not in PERTURBATIONS:
            raise UserError(f"unknown perturbation {name!r} (choose from {', '.join(PERTURBATIONS)})")
    return list(names)


def _rng(seed: int, text: str) -> random.Random:
    return random.Random(f"{seed}\x1f{text}")


def wrong_number(text: str, seed: int) -> str:
    """The text with its final answer number replaced by a different one (same format, seeded)."""
    found = find_final_number(text)
    if found is None:
        raise PerturbationNotApplicable("wrong_answer: the assistant turn has no number to change")
    digits = text[found.start:found.end]
    magnitude = abs(found.value)
    decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
    step = _rng(seed, text).randint(1, 9)
    # Move the magnitude up, or down when that stays non-negative; never zero change.
    new = magnitude + step if (magnitude < step or _rng(seed + 1, text).random() < 0.5) else magnitude - step
    assert new != magnitude
    rendered = f"{new:,.{decimals}f}" if "," in digits else f"{new:.{decimals}f}"
    return text[:found.start] + rendered + text[found.end:]


def truncate_text(text: str) -> str:
    """The first half of the text, cut at the word boundary at or before the middle."""
    middle = len(text) // 2
    cut = max((i for i, ch in enumerate(text[: middle + 1]) if ch.isspace()), default=-1)
    if cut <= 0:  # no boundary before the middle: the next one, else half the characters
        cut = next((i for i in range(middle, len(text)) if text[i].isspace()), middle)
    return text[:cut].rstrip()


def _assistant(messages: list[Message]) -> Message:
    if not messages or messages[-1].role != "assistant":
        raise PerturbationNotApplicable("the conversation does not end with an assistant turn")
    return messages[-1]


def _replace_last(messages: list[Message], content: str) -> list[Message]:
    return [*messages[:-1], Message(role="assistant", content=content)]


def perturb(name: str, messages: list[Message], *, seed: int, pool: Sequence[list[Message]]) -> list[Message]:
    """The conversation with its final assistant turn perturbed by `name` (a new list; input untouched).

    `pool` holds `swap` candidates in order of preference (see `SwapRing`): swap takes the assistant turn of the
    first one whose final assistant turn differs from this conversation's. Raises UserError for an unknown name
    and PerturbationNotApplicable (a ValueError) when the conversation cannot take the perturbation.
    """
    validate([name])
    if name == "none":
        return list(messages)
    last = _assistant(messages)
    if name == "remove":
        return list(messages[:-1])
    if name == "generic":
        return _replace_last(messages, GENERIC_RESPONSE)
    if name == "truncate":
        cut = truncate_text(last.content)
        if not cut or cut == last.content.rstrip():
            raise PerturbationNotApplicable("truncate: the assistant turn is too short to cut")
        return _replace_last(messages, cut)
    if name == "wrong_answer":
        return _replace_last(messages, wrong_number(last.content, seed))
    # swap
    for other in pool:
        if other and other[-1].role == "assistant" and other[-1].content != last.content:
            return _replace_last(messages, other[-1].content)
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


__all__ = ["GENERIC_RESPONSE", "PERTURBATIONS", "PerturbationNotApplicable", "SwapRing", "perturb", "validate"]
