"""Deterministic pre-labels applied before any judge call (empty turns, verbatim restatements, role-token leaks),
recorded as `JudgeVerdict(judge="rule:<name>", source="rule")`; a rule-labelled record is not sent to the judge
unless asked (`--judge-all`).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass

from userturn.core.records import JudgeVerdict, ProbeRecord
from userturn.core.taxonomy import Label

RESTATE_THRESHOLD = 0.9

# Special tokens of common chat templates: <|im_end|>, <|eot_id|>, <s>, </s>, <eos>, [INST], <start_of_turn> ...
SPECIAL_TOKEN = re.compile(
    r"<\|[^|<>\s]{1,40}\|>|</?s>|<eos>|<bos>|<pad>|<unk>|\[/?INST\]|<start_of_turn>|<end_of_turn>|<\|endoftext\|>",
)
# A turn that opens with any role header / role token, or with "assistant:" / "### Assistant:".
ROLE_AT_START = re.compile(
    r"^\s*(?:<\|[^|<>\s]{1,40}\|>|<start_of_turn>|\[/?INST\]|(?:#+\s*)?(?:assistant|system|model)\s*:)",
    re.IGNORECASE,
)
# An assistant header anywhere: the model went on to write the assistant's turn.
ASSISTANT_HEADER = re.compile(
    r"<\|im_start\|>\s*assistant|<\|start\|>\s*assistant|<\|assistant\|>|"
    r"<\|start_header_id\|>\s*assistant\s*<\|end_header_id\|>|<start_of_turn>\s*model",
    re.IGNORECASE,
)
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


@dataclass(frozen=True)
class RuleHit:
    rule: str
    label: Label
    detail: str


def normalise_text(text: str) -> str:
    """Lower-case, NFKC, special tokens and punctuation removed, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", SPECIAL_TOKEN.sub(" ", text)).lower()
    return " ".join(_PUNCT.sub(" ", text).split())


def query_and_response(record: ProbeRecord) -> tuple[str, str]:
    """The probed user query (last user message) and the assistant response that follows it ('' if none)."""
    query, response = "", ""
    for message in record.messages:
        if message.role == "user":
            query, response = message.content, ""
        elif message.role == "assistant":
            response = message.content
    return query, response


def is_restatement(turn: str, query: str, threshold: float = RESTATE_THRESHOLD) -> float | None:
    """The similarity when `turn` restates `query` (ratio >= threshold), else None. Cheap bounds first."""
    na, nb = normalise_text(turn), normalise_text(query)
    if not na or not nb:
        return None
    if 2 * min(len(na), len(nb)) / (len(na) + len(nb)) < threshold:  # real_quick_ratio, before building a matcher
        return None
    matcher = difflib.SequenceMatcher(None, na, nb, autojunk=False)
    if matcher.quick_ratio() < threshold:
        return None
    ratio = matcher.ratio()
    return ratio if ratio >= threshold else None


def apply_rules(user_turn: str | None, query: str, threshold: float = RESTATE_THRESHOLD) -> RuleHit | None:
    """The first rule that fires on a generated user turn, or None."""
    text = user_turn or ""
    if not SPECIAL_TOKEN.sub("", text).strip():
        return RuleHit("empty", "empty", "no text besides whitespace / special tokens")
    match = ROLE_AT_START.search(text) or ASSISTANT_HEADER.search(text)
    if match:
        return RuleHit("role_leak", "assistant_continuation", f"role token {match.group(0).strip()!r}")
    if query:
        ratio = is_restatement(text, query, threshold)
        if ratio is not None:
            return RuleHit("restatement", "restates_query", f"similarity to the query {ratio:.3f} >= {threshold:g}")
    return None


def prelabel(record: ProbeRecord, threshold: float = RESTATE_THRESHOLD) -> JudgeVerdict | None:
    """A rule verdict for a generated record, or None when no rule fires (or there is no generation)."""
    if record.status != "ok":
        return None
    query, _ = query_and_response(record)
    hit = apply_rules(record.user_turn, query, threshold)
    if hit is None:
        return None
    return JudgeVerdict(judge=f"rule:{hit.rule}", source="rule", status="ok", label=hit.label, rationale=hit.detail)
