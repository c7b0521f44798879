"""Parsing judge replies (reasoning stripped, JSON found in free text) and the versioned prompt."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest
from userturn.client.errors import UserError
from userturn.judges.parse import ParseError, message_text, parse_verdict, response_schema, strip_reasoning
from userturn.judges.prompt import load_prompt, parse_prompt
from userturn.judges.taxonomy import normalise_label


@pytest.mark.parametrize("reply", [
    '{"rationale": "asks about step 2", "label": "genuine_followup"}',
    '<think>hmm {"label": "generic"}</think>\n{"rationale": "asks about step 2", "label": "genuine_followup"}',
    'Sure. Here is my verdict:\n```json\n{"rationale": "asks about step 2", "label": "genuine_followup"}\n```',
    'The verdict is {"rationale": "asks about step 2", "label": "Genuine follow-up"} as requested.',
    'reasoning goes here</think>{"label": "genuine_followup", "rationale": "asks about step 2"}',
    '{"oops": 1} then {"rationale": "asks about step 2", "label": "GENUINE_FOLLOWUP"}',
])
def test_parse_variants(reply: str) -> None:
    out = parse_verdict(reply)
    assert out.label == "genuine_followup"
    assert out.rationale == "asks about step 2"


@pytest.mark.parametrize(("reply", "why"), [
    (None, "empty reply"),
    ("", "empty reply"),
    ("I think it is a follow-up.", "no JSON object"),
    ('{"rationale": "x", "label": "followup-ish"}', "label"),
    ("<think>still thinking about {\"label\": \"generic\"}", "only reasoning"),
    ("[1, 2, 3]", "no JSON object"),
])
def test_parse_failures(reply: str | None, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_verdict(reply)


def test_strip_reasoning() -> None:
    assert strip_reasoning("<think>a</think>b<think>c</think>d") == "bd"
    assert strip_reasoning("x</think>y") == "y"
    assert strip_reasoning("y<think>unfinished") == "y"


def test_normalise_label() -> None:
    assert normalise_label("Genuine Follow-Up") == "genuine_followup"
    assert normalise_label(" restates_query. ") == "restates_query"
    assert normalise_label("something") is None
    assert normalise_label(3) is None


def test_schema_lists_every_label() -> None:
    schema = response_schema()["json_schema"]["schema"]
    assert schema["required"] == ["rationale", "label"]
    assert len(schema["properties"]["label"]["enum"]) == 7


def test_message_text() -> None:
    data = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                                     "reasoning_content": "ignored"}, "finish_reason": "stop"}]}
    assert message_text(data) == ("ab", "stop")
    assert message_text({"nope": 1}) == (None, None)


def test_packaged_prompt_is_versioned_and_hashed() -> None:
    prompt = load_prompt()
    raw = resources.files("userturn.judges").joinpath("prompts", "judge_v1.md").read_bytes()
    assert prompt.name == "judge_v1.md"
    assert prompt.sha256 == hashlib.sha256(raw).hexdigest()
    system, user = prompt.messages("What is 2+2?", "", "why {{ 4 }}?")
    assert "genuine_followup" in system["content"] and "empty" in system["content"]
    assert "<!--" not in system["content"]
    assert "What is 2+2?" in user["content"] and "(no assistant response)" in user["content"]
    assert "why {{ 4 }}?" in user["content"]  # generated text is data, never template code


def test_bad_prompt_files(tmp_path) -> None:
    with pytest.raises(UserError, match="exactly one"):
        parse_prompt("# system\nx\n", "p.md")
    with pytest.raises(UserError, match="user_turn"):
        parse_prompt("# system\nx\n# user\n{{ query }} {{ response }}\n", "p.md")
    with pytest.raises(UserError, match="not found"):
        load_prompt(tmp_path / "missing.md")
    good = tmp_path / "judge_v2.md"
    good.write_text("# system\nS\n# user\nQ={{ query }} R={{ response }} T={{ user_turn }}\n")
    assert load_prompt(good).messages("q", "r", "t")[1]["content"] == "Q=q R=r T=t"
