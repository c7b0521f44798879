"""`none`: the assistant turn as it is (the reference condition every perturbed row is compared with)."""

from __future__ import annotations

from collections.abc import Sequence

from userturn.client.probe.perturbations.base import Perturbation, Perturbed
from userturn.core.records import Message


class Unperturbed(Perturbation):
    def apply(self, messages: list[Message], *, seed: int, partners: Sequence[list[Message]],
              gold: str | None) -> Perturbed:
        return Perturbed(list(messages))


PERTURBATION = Unperturbed("none", "the assistant turn as it is", order=0, needs_assistant_turn=False)
