"""The one record schema: every generated user turn is one JSON line of `ProbeRecord`.

The writer, the resume reader, the judge and the report all use these models.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Label = Literal[
    "genuine_followup",
    "restates_query",
    "assistant_continuation",
    "meta_commentary",
    "generic",
    "unrelated_query",
    "empty",
]
LABELS: tuple[str, ...] = Label.__args__  # type: ignore[attr-defined]


class Message(BaseModel):
    """One chat message. `reasoning_content` is kept out of rendered history, as templates do."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class JudgeVerdict(BaseModel):
    """One judge's verdict on one generated user turn (or a deterministic rule's)."""

    judge: str = Field(description="judge model name, or 'rule:<name>' for a pre-label")
    source: Literal["judge", "rule"] = "judge"
    status: Literal["ok", "error"]
    label: Label | None = None
    rationale: str | None = None
    raw: str | None = Field(default=None, description="raw judge output, kept when it could not be parsed")
    error: str | None = None
    prompt_sha256: str | None = Field(default=None, description="hash of the judge prompt file")
    attempts: int = 0
    latency_s: float | None = None


class ProbeRecord(BaseModel):
    """One generated user turn for one (model, dataset, item, mode, perturbation, temperature, sample)."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    key: str
    model: str
    dataset: str
    item_id: str
    mode: Literal["raw", "chat"] = "raw"
    perturbation: str = "none"
    temperature: float
    sample: int
    seed: int
    # What was sent.
    messages: list[Message] = Field(default_factory=list, description="the conversation probed")
    assistant_source: Literal["dataset", "model", "none"] = "dataset"
    prompt_sha256: str | None = None
    template_sha256: str | None = None
    # What came back.
    user_turn: str | None = None
    finish_reason: str | None = None
    matched_stop: str | int | None = None
    status: Literal["ok", "error"]
    error: str | None = None
    usage: Usage | None = None
    latency_s: float | None = None
    attempts: int = 0
    # Task accuracy of the assistant turn (when the dataset has a reference answer).
    reference_answer: str | None = None
    correct: bool | None = None
    task_scores: dict[str, float] | None = None
    # Judging (filled by judges/).
    label: Label | None = None
    label_source: Literal["rule", "judge", "majority"] | None = None
    judge_status: Literal["ok", "error"] | None = None
    judges: list[JudgeVerdict] = Field(default_factory=list)
    meta: dict | None = None


def record_key(
    model: str,
    dataset: str,
    item_id: str,
    perturbation: str,
    temperature: float,
    sample: int,
    mode: str = "raw",
) -> str:
    """Stable, human-readable identity of one sample; resume matches on it."""
    return f"{model}|{dataset}|{item_id}|{mode}|{perturbation}|t={float(temperature):g}|s={sample}"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
