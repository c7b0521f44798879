"""`userturn` itself: the public API, loaded name by name on first use (PEP 562), and one version."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import userturn


def test_every_exported_name_resolves_to_its_module() -> None:
    for name in userturn.__all__:
        value = getattr(userturn, name)
        assert value is not None, name
    assert userturn.ProbeRun.__module__ == "userturn.client.probe.pipeline"
    assert userturn.launch.__module__ == "userturn.serve.launcher"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = userturn.nothing


def test_the_version_has_one_source() -> None:
    assert userturn.__version__ == importlib.metadata.version("userturn")
    from userturn.core.fingerprint import run_info

    assert run_info().userturn_version == userturn.__version__


def test_importing_userturn_loads_no_layer() -> None:
    code = ("import sys, userturn\n"
            "loaded = [m for m in sys.modules if m.startswith('userturn.')]\n"
            "print(','.join(loaded))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", out
