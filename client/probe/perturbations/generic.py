"""`generic`: the answer replaced by a fixed non-answer (re-asking should rise)."""

from __future__ import annotations

from collections.abc import Sequence

from userturn.client.probe.perturbations.base import Perturbation, PerturbationNotApplicable, Perturbed, replace_last
from userturn.core.records import Message

GENERIC_RESPONSE = "I'm not able to help with that right now."


class Generic(Perturbation):
    def apply(self, messages: list[Message], *, seed: int, partners: Sequence[list[Message]],
              gold: str | None) -> Perturbed:
        last = messages[-1]
        if last.content.strip() == GENERIC_RESPONSE:
            raise PerturbationNotApplicable("generic: the assistant turn already is the generic non-answer")
        return Perturbed(replace_last(messages, GENERIC_RESPONSE), {"replaced_chars": len(last.content)})


PERTURBATION = Generic("generic", "a fixed non-answer (re-asking should rise)", order=50)
