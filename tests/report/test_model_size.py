"""Models ordered by the parameter count in their names (the paper's scale order), overridable."""

from __future__ import annotations

import pytest

from userturn.core.errors import UserError
from userturn.report.model_size import order_models, parameter_count, parse_model_order


@pytest.mark.parametrize(("name", "count"), [
    ("Qwen/Qwen3.5-0.8B", 0.8e9), ("Qwen3.5-122B-A10B", 122e9), ("qwen3.5-397b-a17b", 397e9),
    ("smollm2-135m-instruct", 135e6), ("openai/gpt-oss-120b", 120e9), ("Mixtral-8x7B", 56e9),
    ("Qwen3.5-35B-A3B", 35e9), ("glm-4.5-air", None), ("qwen3", None), ("model-v2", None), ("phi-1.5t", 1.5e12),
])
def test_parameter_count_from_the_name(name: str, count: float | None) -> None:
    assert parameter_count(name) == count


def test_order_by_size_then_unsized_by_name() -> None:
    names = ["Qwen3.5-122B-A10B", "Qwen3.5-0.8B", "Qwen3.5-27B", "Qwen3.5-2B", "zeta", "Qwen3.5-397B-A17B",
             "Qwen3.5-9B", "alpha"]
    assert order_models(names) == ["Qwen3.5-0.8B", "Qwen3.5-2B", "Qwen3.5-9B", "Qwen3.5-27B", "Qwen3.5-122B-A10B",
                                   "Qwen3.5-397B-A17B", "alpha", "zeta"]  # as strings: 0.8B, 122B, 27B, 2B, ...
    assert order_models(names, ["zeta", "Qwen3.5-9B"])[:3] == ["zeta", "Qwen3.5-9B", "Qwen3.5-0.8B"]
    with pytest.raises(UserError, match="no model named nope"):
        order_models(names, ["nope"])


def test_parse_model_order() -> None:
    assert parse_model_order(" a, b ,c") == ["a", "b", "c"]
    with pytest.raises(ValueError):
        parse_model_order("a,,b")
