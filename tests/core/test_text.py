"""The one strip_reasoning and the one content-to-text helper every layer uses (userturn/core/text.py)."""

from __future__ import annotations

import pytest

from userturn.client.probe import assistant_turns, requests, scoring
from userturn.core import text
from userturn.judges import parse


@pytest.mark.parametrize(("reply", "answer"), [
    ("<think>maybe 9</think>\nThe answer is 7.", "The answer is 7."),
    ("half a thought</think> 7", "7"),  # the opening tag was in the prompt
    ("<think>cut off mid-thought 9", ""),  # reasoning cut by the token limit: no answer
    ("Answer first. <think>then a cut thought", "Answer first."),
    ("<THINKING>x</THINKING>ok", "ok"),
    ("<reasoning>a</reasoning> b <think>c</think> d", "b d"),
    ("plain", "plain"),
    ("  \n plain, 3 > 2 \t\n", "plain, 3 > 2"),  # no tag can start without `<`: only stripped
])
def test_strip_reasoning(reply: str, answer: str) -> None:
    assert text.strip_reasoning(reply) == answer


@pytest.mark.parametrize("reply", [
    "<think><think>a</think>b</think> c", "x</think><think>y</think>z<think>", "<THINK> a </think> b </Think>",
    " a <b> c ", "</reasoning></think>", "<think>\n</think>\n\n  ", "<<think>>x</think>>",
])
def test_strip_reasoning_is_idempotent(reply: str) -> None:
    """Its result holds no tag (the text after the last closing tag, cut before the first opening one), so
    stripping twice (the pipeline, then a scorer) is stripping once."""
    once = text.strip_reasoning(reply)
    assert text.strip_reasoning(once) == once


def test_every_layer_uses_the_same_strip_reasoning() -> None:
    assert scoring.strip_reasoning is assistant_turns.strip_reasoning is requests.strip_reasoning
    assert requests.strip_reasoning is text.strip_reasoning  # the judge's parser has its own rule: only an opening
    # <think> is reasoning there (judges/parse.py), so a quoted turn cannot hide a verdict


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


@pytest.mark.parametrize(("reply", "reasoning"), [
    ("<think> a\nb </think>\n\nHello", "a\nb"), ("<think>one</think> x <think>two</think>", "one"),
    ("no tags", None), ("<think>cut before the end", None),
])
def test_reasoning_of_is_the_first_complete_block(reply: str, reasoning: str | None) -> None:
    assert text.reasoning_of(reply) == reasoning
