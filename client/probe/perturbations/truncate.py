"""`truncate`: the answer cut mid-sentence (the model should ask to continue)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from userturn.client.probe.perturbations.base import Perturbation, PerturbationNotApplicable, Perturbed, replace_last
from userturn.core.records import Message

MIN_TRUNCATE_WORDS = 6
_SENTENCE_END = re.compile(r"[.!?:;]['\")\]*]*$")


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


class Truncate(Perturbation):
    def apply(self, messages: list[Message], *, seed: int, partners: Sequence[list[Message]],
              gold: str | None) -> Perturbed:
        last = messages[-1]
        if len(last.content.split()) < MIN_TRUNCATE_WORDS:
            raise PerturbationNotApplicable(f"truncate: the assistant turn has fewer than {MIN_TRUNCATE_WORDS} words")
        cut = truncate_text(last.content)
        if not cut:
            raise PerturbationNotApplicable("truncate: no word boundary that stops mid-sentence")
        return Perturbed(replace_last(messages, cut), {"kept_chars": len(cut), "of_chars": len(last.content)})


PERTURBATION = Truncate("truncate", "the answer cut mid-sentence (the model should ask to continue)", order=20)
