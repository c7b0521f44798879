"""A chat template compiled with minijinja (Rust): the same bytes as the jinja2 backend, 2.5-5x faster.

At one sample per item the probe renders one prompt per request, and jinja2 (transformers' sandbox, in Python) is
then the largest cost per request. minijinja renders the shipped families' templates byte-identically to
transformers' `apply_chat_template` (tests/test_templates.py checks both engines against transformers), but it is
another engine, so it is trusted only where it is checked:

* at load: `MiniJinjaBackend.checked` renders a battery of conversations (system turns, reasoning, multi-turn,
  unicode and markup, tool-free and empty content, the open user turn the probe cuts at) with both engines and
  returns None (use jinja2) on any compile error, render error or byte difference;
* while running: the first `VERIFY_FIRST` renders, and one in `VERIFY_EVERY` after that, are rendered by jinja2 too;
  on a difference the backend says so once on stderr and hands every later render to jinja2, and the jinja2 text
  is the one returned. A render that minijinja cannot do (a template's `raise_exception`, an unsupported
  construct) is always redone by jinja2, so errors read exactly as before.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

VERIFY_FIRST = 32
VERIFY_EVERY = 64

_BATTERY: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}],
    [{"role": "user", "content": "Solve x+1=3."},
     {"role": "assistant", "content": "x = 2", "reasoning_content": "Subtract 1.", "thinking": "Subtract 1."}],
    [{"role": "user", "content": "first"}, {"role": "assistant", "content": "one"},
     {"role": "user", "content": "second"}, {"role": "assistant", "content": "two"}],
    [{"role": "user", "content": "Grüße, 你好, 🙂 — \"quotes\" & <tags> {{ braces }} {% pct %} \\ back"},
     {"role": "assistant", "content": "Ça va ?\n\n```py\nprint('x')\n```\n<think>x</think>"}],
    [{"role": "system", "content": "Rules:\n- be kind\n"}, {"role": "user", "content": "  padded  \n"},
     {"role": "assistant", "content": "\nanswer with newlines\n\n"}],
    [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\ninline\n</think>\n\nA"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "only a question"}],
]


class MiniJinjaBackend:
    """A chat template compiled once with minijinja, cross-checked against the jinja2 backend (`reference`)."""

    engine = "jinja"  # the template language, as recorded (`config.template_engine`): the bytes are jinja2's
    compiler = "minijinja"

    def __init__(self, source: str, variables: Mapping[str, Any], now: datetime, reference: Any) -> None:
        import minijinja
        from userturn.client.templates import _tojson

        env = minijinja.Environment()
        env.trim_blocks = True
        env.lstrip_blocks = True
        env.keep_trailing_newline = False
        env.undefined_behavior = "lenient"
        env.add_filter("tojson", _tojson)
        env.add_global("raise_exception", _raise)
        env.add_global("strftime_now", now.strftime)
        env.add_template("chat", source)
        self._env = env
        self.variables = dict(variables)
        self.reference = reference  # the jinja2 backend: errors, checks, and the fallback
        self.name = getattr(reference, "name", "")
        self._renders = 0
        self._diverged = False

    @classmethod
    def checked(cls, source: str, variables: Mapping[str, Any], now: datetime, reference: Any,
                ) -> MiniJinjaBackend | None:
        """A backend when minijinja is installed and renders the battery exactly as `reference`; else None."""
        try:
            backend = cls(source, variables, now, reference)
            for messages in _BATTERY:
                for conversation, gen in ((messages, True), ([*messages, {"role": "user", "content": "SENTINEL"}],
                                                             False)):
                    if backend._render(conversation, gen) != reference.render(conversation,
                                                                              add_generation_prompt=gen):
                        return None
        except Exception:  # not installed, does not compile, fails where jinja2 renders, or jinja2 itself fails
            return None
        return backend

    def _render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> str:
        text: str = self._env.render_template("chat", messages=list(messages), tools=None, documents=None,
                                              add_generation_prompt=add_generation_prompt, **self.variables)
        return text

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        if self._diverged:
            return str(self.reference.render(messages, add_generation_prompt=add_generation_prompt))
        try:
            text = self._render(messages, add_generation_prompt)
        except Exception:  # the template's own error (raise_exception) or a construct minijinja lacks: jinja2 says
            return str(self.reference.render(messages, add_generation_prompt=add_generation_prompt))
        self._renders += 1
        if self._renders <= VERIFY_FIRST or self._renders % VERIFY_EVERY == 0:
            expected = str(self.reference.render(messages, add_generation_prompt=add_generation_prompt))
            if text != expected:
                self._diverged = True
                print(f"userturn: minijinja rendered the chat template of {self.name} differently from jinja2 "
                      "(transformers' engine); jinja2 renders every prompt from here on", file=sys.stderr)
                return expected
        return text


def _raise(message: str) -> None:
    raise ValueError(message)


__all__ = ["VERIFY_EVERY", "VERIFY_FIRST", "MiniJinjaBackend"]
