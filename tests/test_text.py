"""The one strip_reasoning and the one content-to-text helper every layer uses (userturn/text.py)."""

from __future__ import annotations

import pytest
from userturn.client import pipeline, scoring
from userturn.judges import parse

from userturn import text


@pytest.mark.parametrize(("reply", "answer"), [
    ("<think>maybe 9</think>\nThe answer is 7.", "The answer is 7."),
    ("half a thought</think> 7", "7"),  # the opening tag was in the prompt
    ("<think>cut off mid-thought 9", ""),  # reasoning cut by the token limit: no answer
    ("Answer first. <think>then a cut thought", "Answer first."),
    ("<THINKING>x</THINKING>ok", "ok"),
    ("<reasoning>a</reasoning> b <think>c</think> d", "b d"),
    ("plain", "plain"),
])
def test_strip_reasoning(reply: str, answer: str) -> None:
    assert text.strip_reasoning(reply) == answer


def test_every_layer_uses_the_same_strip_reasoning() -> None:
    assert scoring.strip_reasoning is pipeline.strip_reasoning is parse.strip_reasoning is text.strip_reasoning


@pytest.mark.parametrize(("content", "expected"), [
    ("hi", "hi"), (None, ""), ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "ab"),
    (["a", {"text": "b"}, {"type": "image_url"}], "ab"),
])
def test_content_text(content: object, expected: str) -> None:
    assert text.content_text(content) == expected


@pytest.mark.parametrize("content", [3, {"text": "x"}, [1], [{"text": 2}]])
def test_content_text_refuses_what_is_not_text(content: object) -> None:
    with pytest.raises(TypeError, match="not text"):
        text.content_text(content)


def test_chat_reply_content_parts_are_joined_and_odd_content_is_no_reply() -> None:
    reply = {"choices": [{"message": {"content": [{"type": "text", "text": '{"label"'}, ': "generic"}']},
                          "finish_reason": "stop"}]}
    assert parse.message_text(reply) == ('{"label": "generic"}', "stop")
    assert parse.message_text({"choices": [{"message": {"content": 5}}]}) == (None, None)
