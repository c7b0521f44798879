"""`wrong_answer`: the stated numeric final answer moved by 1 to 9, seeded, never to the gold answer (a model that
reads the answer should push back). Applies only to items with a numeric gold answer whose assistant turn states
one."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from userturn.client.probe.perturbations.base import Perturbation, PerturbationNotApplicable, Perturbed, replace_last
from userturn.client.probe.scoring import parse_number, stated_answer
from userturn.core.records import Message
from userturn.core.text import strip_reasoning


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


class WrongAnswer(Perturbation):
    def apply(self, messages: list[Message], *, seed: int, partners: Sequence[list[Message]],
              gold: str | None) -> Perturbed:
        text, detail = wrong_number(messages[-1].content, seed, gold)
        return Perturbed(replace_last(messages, text), detail)


PERTURBATION = WrongAnswer(
    "wrong_answer", "the stated numeric final answer changed (the model should push back); numeric gold only",
    order=10)
