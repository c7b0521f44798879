"""Ctrl-C while `userturn` starts (its imports, its parser) is one line and exit 130, not a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A Ctrl-C is a KeyboardInterrupt raised wherever the main thread is; this one is raised at the moment the named
# module is imported, as a Ctrl-C pressed during that import would be.
CHILD = """
import sys
import importlib.abc

TARGET = sys.argv[1]


class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
from userturn.cli import entry
sys.argv = ["userturn", "list"]
sys.exit(entry())
"""


@pytest.mark.parametrize("module", ["userturn.cli.app", "pydantic", "userturn.cli.list"])
def test_ctrl_c_during_start_up_is_one_line_and_exit_130(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, module], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("userturn: interrupted")
