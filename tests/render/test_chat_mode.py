"""Chat mode role flip."""

from __future__ import annotations

import hashlib

from userturn.client.render.chat_mode import (
    ASSISTANT_SETUP_HEADER,
    CHAT_MODE_PROMPT,
    CHAT_MODE_PROMPT_SHA256,
    NO_REPLY,
    role_flip_messages,
)
from userturn.core.records import Message


def m(role: str, content: str) -> Message:
    return Message(role=role, content=content)


def test_roles_swap_and_instruction_leads():
    out = role_flip_messages([m("user", "q1"), m("assistant", "a1"), m("user", "q2"), m("assistant", "a2")])
    assert out[0] == m("system", CHAT_MODE_PROMPT)
    assert [(x.role, x.content) for x in out[1:]] == [
        ("assistant", "q1"), ("user", "a1"), ("assistant", "q2"), ("user", "a2")]


def test_system_prompt_is_quoted_in_the_instruction_not_kept():
    out = role_flip_messages([m("system", "You are a pirate."), m("developer", "Be short."), m("user", "hi"),
                              m("assistant", "arr")])
    assert out[0].role == "system"
    assert out[0].content == f"{CHAT_MODE_PROMPT}\n\n{ASSISTANT_SETUP_HEADER}\nYou are a pirate.\n\nBe short."
    assert [x.role for x in out] == ["system", "assistant", "user"]


def test_conversation_ending_with_user_gets_a_no_reply_marker():
    out = role_flip_messages([m("user", "q")])
    assert [(x.role, x.content) for x in out[1:]] == [("assistant", "q"), ("user", NO_REPLY)]


def test_reasoning_is_not_carried_and_hash_is_of_the_text():
    out = role_flip_messages([m("user", "q"), Message(role="assistant", content="a", reasoning_content="secret")])
    assert "reasoning_content" not in out[-1].model_dump()
    assert hashlib.sha256(CHAT_MODE_PROMPT.encode()).hexdigest() == CHAT_MODE_PROMPT_SHA256
