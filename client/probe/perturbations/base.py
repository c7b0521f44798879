"""What a perturbation is: a named, deterministic change of the final assistant turn that says what it changed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from userturn.core.records import Message

# The record's `meta` key naming the partner item whose assistant turn a partner-needing perturbation put in.
PARTNER_META = "swap_partner"


class PerturbationNotApplicable(ValueError):
    """This perturbation cannot be applied to this conversation (e.g. no stated numeric answer to change)."""


@dataclass(frozen=True)
class Perturbed:
    """The conversation to probe and what the perturbation changed (None for `none`)."""

    messages: list[Message]
    detail: dict[str, Any] | None = None


@dataclass(frozen=True)
class Perturbation:
    """One perturbation. `order` places it in listings; `needs_partner`: it puts in another item's assistant turn
    (a partner of the same `meta.category`, found by the run on its `PartnerRing`); `needs_assistant_turn`: it
    changes the final assistant turn, so a conversation without one is not applicable."""

    name: str
    summary: str
    order: int
    needs_partner: bool = False
    needs_assistant_turn: bool = True

    def apply(self, messages: list[Message], *, seed: int, partners: Sequence[list[Message]],
              gold: str | None) -> Perturbed:
        """The perturbed conversation (a new list) and what changed; PerturbationNotApplicable where it would
        misfire. `partners`: candidate conversations in order of preference (partner-needing perturbations)."""
        raise NotImplementedError


def replace_last(messages: list[Message], content: str) -> list[Message]:
    """The conversation with its final (assistant) turn's content replaced."""
    return [*messages[:-1], Message(role="assistant", content=content)]
