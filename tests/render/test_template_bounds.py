"""A chat template is untrusted code (a GGUF's, a hub tokenizer's): a render is bounded in time and output by the
sandbox itself and refused in one line naming where the template came from."""

from __future__ import annotations

import time
import tracemalloc
from datetime import datetime

import pytest

from userturn.client.render import jinja_env
from userturn.client.render.templates import JinjaBackend
from userturn.core.errors import UserError

MESSAGES = [{"role": "user", "content": "hi"}]


def render(source: str) -> str:
    return JinjaBackend(source, {}, datetime(2026, 1, 1), "org/model.Q4_K_M.gguf").render(
        MESSAGES, add_generation_prompt=True)


def test_two_nested_ranges_stop_at_the_deadline_naming_the_template_s_source(monkeypatch) -> None:
    monkeypatch.setattr(jinja_env, "RENDER_DEADLINE_S", 0.3)
    started = time.monotonic()
    with pytest.raises(UserError) as caught:
        render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x")
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert message.startswith("chat template of org/model.Q4_K_M.gguf refused: rendering ran past 0.3 s")
    assert "\n" not in message


def test_output_is_capped_before_it_is_held(monkeypatch) -> None:
    monkeypatch.setattr(jinja_env, "MAX_OUTPUT_CHARS", 100_000)
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match="refused: its output passed 100,000 characters"):
            render("{% for i in range(100000) %}{% for j in range(100000) %}abcdefgh{% endfor %}{% endfor %}")
        assert tracemalloc.get_traced_memory()[1] < 20_000_000
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("source", "why"), [
    ("{{ 'x' * 1000000000 }}", "a sequence of 1 times 1000000000"),
    ("{{ [1, 2] * 100000000 }}", "a sequence of 2 times 100000000"),
    ("{{ 2 ** 100000000 }}", "too large a number"),
    ("{{ 'x' | center(1000000000) }}", "a size of 1,000,000,000 asked"),
    ("{{ 'x'.ljust(1000000000) }}", "a size of 1,000,000,000 asked"),
])
def test_one_step_that_would_build_too_much_is_refused_before_it_runs(source: str, why: str) -> None:
    started = time.monotonic()
    with pytest.raises(UserError, match=why):
        render(source)
    assert time.monotonic() - started < 2


def test_templates_within_the_bounds_render_as_before() -> None:
    source = ("{% for m in messages %}<{{ m.role }}>{{ m.content | center(6) }}{% endfor %}"
              "{% for i in range(3) | reverse %}{{ i }}{% endfor %}{{ range(5) | length }}{{ range(2, 5) | list }}"
              "{{ '-' * 3 }}{{ 2 ** 10 }}{% for i in range(messages | length - 1, -1, -1) %}{{ i }}{% endfor %}")
    assert render(source) == "<user>  hi  2105[2, 3, 4]---10240"
