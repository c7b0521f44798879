"""`swap`: another item's answer, of the same category (the model should point out the mismatch). The run finds the
partner (`PartnerRing`); the first candidate whose final assistant turn differs from this one is put in."""

from __future__ import annotations

from collections.abc import Sequence

from userturn.client.probe.perturbations.base import Perturbation, PerturbationNotApplicable, Perturbed, replace_last
from userturn.core.records import Message


class Swap(Perturbation):
    def apply(self, messages: list[Message], *, seed: int, partners: Sequence[list[Message]],
              gold: str | None) -> Perturbed:
        last = messages[-1]
        for other in partners:
            if other and other[-1].role == "assistant" and other[-1].content != last.content:
                return Perturbed(replace_last(messages, other[-1].content),
                                 {"replaced_chars": len(last.content), "with_chars": len(other[-1].content)})
        raise PerturbationNotApplicable("swap: no other item's assistant turn to swap in")


PERTURBATION = Swap("swap", "another item's answer, same category (the model should point out the mismatch)",
                    order=30, needs_partner=True)
