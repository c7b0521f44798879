"""The label taxonomy for generated user turns: one table (`TAXONOMY`) holding each label's name, short code,
description, figure colour and whether it counts as a genuine follow-up. The judge schema, the report, figures,
exports, rerank and posttrain read it; nothing else lists labels. Adding a label: a row here, the name in `Label`,
and a new judge prompt version that describes it."""

from __future__ import annotations

from typing import Literal, NamedTuple


class LabelInfo(NamedTuple):
    """One label: `short` (two letters, for narrow tables), `description` (what the judge prompt and the report
    say), `colour` (its colour in every figure), `followup` (counts in the follow-up rate's numerator)."""

    name: str
    short: str
    description: str
    colour: str
    followup: bool


Label = Literal[
    "genuine_followup",
    "restates_query",
    "assistant_continuation",
    "meta_commentary",
    "generic",
    "related_new_query",
    "unrelated_query",
    "empty",
]

# Colours: ColorBrewer Set2 (8 colours), a palette apart from the models' tab10 and from the report's greys for
# unjudged records and judge failures.
TAXONOMY: tuple[LabelInfo, ...] = (
    LabelInfo("genuine_followup", "GF",
              "reacts to the assistant's actual answer: asks about a step, pushes back, builds on it",
              "#66c2a5", True),
    LabelInfo("restates_query", "RQ", "repeats or paraphrases the original question", "#fc8d62", False),
    LabelInfo("assistant_continuation", "AC",
              "answers as the assistant (identity drift), including leaked role tokens", "#8da0cb", False),
    LabelInfo("meta_commentary", "MC",
              "talks about the conversation or its own reasoning instead of speaking as the user", "#e78ac3", False),
    LabelInfo("generic", "GE", "filler (\"thanks\", \"ok\") with no grounding in the answer", "#a6d854", False),
    LabelInfo("related_new_query", "RN", "a new question on the conversation's topic that does not react to the "
              "answer (could be asked without reading it)", "#ffd92f", False),
    LabelInfo("unrelated_query", "UQ", "a new request with no connection to the conversation", "#b3b3b3", False),
    LabelInfo("empty", "EM", "nothing, or only whitespace / special tokens", "#e5c494", False),
)

LABELS: tuple[str, ...] = tuple(info.name for info in TAXONOMY)
if Label.__args__ != LABELS:  # type: ignore[attr-defined]
    raise AssertionError("userturn.core.taxonomy: Label and TAXONOMY list different labels")
BY_NAME: dict[str, LabelInfo] = {info.name: info for info in TAXONOMY}
DESCRIPTIONS: dict[str, str] = {info.name: info.description for info in TAXONOMY}
SHORT: dict[str, str] = {info.name: info.short for info in TAXONOMY}
COLOURS: dict[str, str] = {info.name: info.colour for info in TAXONOMY}
FOLLOWUP_LABELS: frozenset[str] = frozenset(info.name for info in TAXONOMY if info.followup)
FOLLOWUP: Label = "genuine_followup"  # the follow-up metric's name (report column, posttrain metric)
if {FOLLOWUP} != FOLLOWUP_LABELS:
    raise AssertionError("userturn.core.taxonomy: the follow-up metric is named after its one counting label")


def is_followup(label: str | None) -> bool:
    """Whether a record with this label counts as a genuine follow-up (the follow-up rate's numerator)."""
    return label in FOLLOWUP_LABELS


def normalise_label(value: object) -> str | None:
    """Map a judge's spelling ('Genuine follow-up', 'GENUINE_FOLLOWUP') to a label name; None if unknown."""
    if not isinstance(value, str):
        return None
    text = "_".join(value.strip().strip("\"'`.").lower().replace("-", " ").replace("_", " ").split())
    text = text.replace("follow_up", "followup")
    return text if text in BY_NAME else None
