"""`.ci/rewrite_imports.py`: code written against the layout before issue 27 imports from the new one, and every
rewritten path exists; the current tree is left as it is."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rewrite_imports", ROOT / ".ci" / "rewrite_imports.py")
assert _spec is not None and _spec.loader is not None
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

OLD = '''from userturn.errors import UserError
from userturn import defaults, aio
from userturn import __version__
from userturn.client.pipeline import ProbeRun
from userturn.client import scoring, endpoint
import userturn.run_builder as run_builder
from userturn.client.loaders.base import RowError
monkeypatch.setattr("userturn.cli_probe.load_items", f)
# see client/pipeline.py and userturn/cli.py
'''
NEW = '''from userturn.core.errors import UserError
from userturn.core import defaults, aio
from userturn.core.version import __version__
from userturn.client.probe.pipeline import ProbeRun
from userturn.client.probe import scoring
from userturn.client.http import endpoint
import userturn.orchestrate.run_builder as run_builder
from userturn.client.data.loaders.base import RowError
monkeypatch.setattr("userturn.cli.probe.load_items", f)
# see client/probe/pipeline.py and userturn/cli/app.py
'''


def test_old_paths_become_new_ones_once() -> None:
    assert tool.rewrite(OLD) == NEW
    assert tool.rewrite(NEW) == NEW


def test_every_new_module_and_path_exists() -> None:
    for new in tool.MODULES.values():
        assert importlib.util.find_spec(new) is not None, new
    for new in tool.PATHS.values():
        assert (ROOT / new).exists(), new


def test_the_tree_needs_no_rewrite() -> None:
    for path in [*ROOT.glob("*/**/*.py"), ROOT / "README.md", ROOT / "pyproject.toml"]:
        if {".venv", "build", ".ci"} & set(path.relative_to(ROOT).parts) or path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8")
        assert tool.rewrite(text, path.suffix == ".py") == text, path
