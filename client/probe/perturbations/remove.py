"""`remove`: no assistant turn at all (genuine follow-ups, which react to an answer, should drop)."""

from __future__ import annotations

from collections.abc import Sequence

from userturn.client.probe.perturbations.base import Perturbation, Perturbed
from userturn.core.records import Message


class Remove(Perturbation):
    def apply(self, messages: list[Message], *, seed: int, partners: Sequence[list[Message]],
              gold: str | None) -> Perturbed:
        return Perturbed(list(messages[:-1]), {"removed_chars": len(messages[-1].content)})


PERTURBATION = Remove("remove", "no assistant turn (genuine follow-ups should drop)", order=40)
