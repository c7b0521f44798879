"""Controlled perturbations of the assistant turn: named, deterministic, seeded, each saying what it changed. Each
perturbation is one module of `client.probe.perturbations`; this module applies one by name.

`perturb(name, messages, *, seed, pool, gold)` returns a `Perturbed`: the conversation to probe and `detail` (the
record's `perturbation_detail`). It depends only on its arguments, never on the item's position in the run. A
perturbation that would misfire on a conversation raises `PerturbationNotApplicable`: the sample is skipped and
counted apart. What each one tests, where it applies and what it changes: docs/perturbations-and-labels.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from userturn.client.probe.perturbations import needs_partner, registry
from userturn.client.probe.perturbations.base import PerturbationNotApplicable, Perturbed
from userturn.client.probe.perturbations.generic import GENERIC_RESPONSE
from userturn.client.probe.perturbations.partners import PartnerRing
from userturn.client.probe.perturbations.truncate import MIN_TRUNCATE_WORDS, truncate_text
from userturn.client.probe.perturbations.wrong_answer import wrong_number
from userturn.core.errors import UserError
from userturn.core.records import Message

REGISTRY = registry()
PERTURBATIONS: tuple[str, ...] = tuple(REGISTRY)
SUMMARIES: dict[str, str] = {name: p.summary for name, p in REGISTRY.items()}

def validate(names: Sequence[str]) -> list[str]:
    """The names, checked; an unknown one is a UserError listing the valid ones."""
    for name in names:
        if name not in REGISTRY:
            raise UserError(f"unknown perturbation {name!r} (choose from {', '.join(PERTURBATIONS)})")
    return list(names)


def perturb(name: str, messages: list[Message], *, seed: int, pool: Sequence[list[Message]],
            gold: str | None = None) -> Perturbed:
    """The conversation (a new list) with its final assistant turn perturbed by `name`, and what changed.

    `pool`: partner candidates in order of preference (`PartnerRing`), for a perturbation that needs one. `gold`:
    the item's reference answer (`wrong_answer` needs a numeric one). Raises UserError for an unknown name,
    PerturbationNotApplicable (a ValueError) where the perturbation would misfire.
    """
    validate([name])
    perturbation = REGISTRY[name]
    if perturbation.needs_assistant_turn and (not messages or messages[-1].role != "assistant"):
        raise PerturbationNotApplicable("the conversation does not end with an assistant turn")
    return perturbation.apply(list(messages), seed=seed, partners=pool, gold=gold)


__all__ = ["GENERIC_RESPONSE", "MIN_TRUNCATE_WORDS", "PERTURBATIONS", "SUMMARIES", "PartnerRing",
           "PerturbationNotApplicable", "Perturbed", "needs_partner", "perturb", "truncate_text",
           "validate", "wrong_number"]
