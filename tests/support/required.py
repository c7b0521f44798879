"""Test helper: the packages the real-model tests need, skipped without them except in CI."""

from __future__ import annotations

import importlib.util
import os

import pytest

from userturn.core.packaged import install_hint


def require(package: str) -> None:
    """Skip without the package, except in CI (USERTURN_REQUIRE_REAL_MODEL=1), where it is a failure."""
    if importlib.util.find_spec(package) is not None:
        return
    message = f"{package} is not installed ({install_hint(package)})"
    if os.environ.get("USERTURN_REQUIRE_REAL_MODEL") == "1":
        pytest.fail(message)
    pytest.skip(message)
