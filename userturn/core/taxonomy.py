"""The label taxonomy for generated user turns: the one list of labels, their descriptions and short names.
Only `genuine_followup` counts as a follow-up."""

from __future__ import annotations

from typing import Literal

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
LABELS: tuple[str, ...] = Label.__args__  # type: ignore[attr-defined]

FOLLOWUP: Label = "genuine_followup"

DESCRIPTIONS: dict[str, str] = {
    "genuine_followup": "reacts to the assistant's actual answer: asks about a step, pushes back, builds on it",
    "restates_query": "repeats or paraphrases the original question",
    "assistant_continuation": "answers as the assistant (identity drift), including leaked role tokens",
    "meta_commentary": "talks about the conversation or its own reasoning instead of speaking as the user",
    "generic": "filler (\"thanks\", \"ok\") with no grounding in the answer",
    "related_new_query": "a new question on the conversation's topic that does not react to the answer (could be asked "
                         "without reading it)",
    "unrelated_query": "a new request with no connection to the conversation",
    "empty": "nothing, or only whitespace / special tokens",
}

SHORT: dict[str, str] = {
    "genuine_followup": "GF",
    "restates_query": "RQ",
    "assistant_continuation": "AC",
    "meta_commentary": "MC",
    "generic": "GE",
    "related_new_query": "RN",
    "unrelated_query": "UQ",
    "empty": "EM",
}


def normalise_label(value: object) -> str | None:
    """Map a judge's spelling ('Genuine follow-up', 'GENUINE_FOLLOWUP') to a label name; None if unknown."""
    if not isinstance(value, str):
        return None
    text = "_".join(value.strip().strip("\"'`.").lower().replace("-", " ").replace("_", " ").split())
    text = text.replace("follow_up", "followup")
    return text if text in LABELS else None
