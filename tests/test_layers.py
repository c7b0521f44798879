"""The import direction between layers (README "Code map"), checked on every import statement in the source,
including imports inside functions and under TYPE_CHECKING.

    core  (userturn/*.py)           imports no other layer
    serve (serve/ -> userturn.serve)   core
    client (client/ -> userturn.client) core
    judges (judges/ -> userturn.judges) core, client
    top   (userturn.cli*, userturn.experiment, userturn.__main__)  everything
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"userturn": "userturn", "client": "userturn.client", "serve": "userturn.serve", "judges": "userturn.judges",
           "manifests": "userturn.manifests", "experiments": "userturn.experiments"}
TOP = ("userturn.cli", "userturn.cli_probe", "userturn.cli_experiment", "userturn.cli_list", "userturn.experiment",
       "userturn.__main__", "userturn.run_builder", "userturn.commands",
       "userturn.cli_show", "userturn.cli_train", "userturn.training_run", "userturn.posttrain")
ALLOWED = {"core": {"core"}, "serve": {"core", "serve"}, "client": {"core", "client"},
           "judges": {"core", "client", "judges"}, "top": {"core", "serve", "client", "judges", "top"}}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = FOLDERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str | None:
    """The layer a dotted module name belongs to; None outside userturn."""
    if module != "userturn" and not module.startswith("userturn."):
        return None
    for name in ("serve", "client", "judges"):
        if module == f"userturn.{name}" or module.startswith(f"userturn.{name}."):
            return name
    if any(module == top or module.startswith(top + ".") for top in TOP):
        return "top"
    return "core"


def imports(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import statement anywhere in `source`; relative imports resolved; for
    `from X import name` both X and X.name are listed (name may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if base == "userturn"]
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    own = layer(module)
    assert own is not None
    return [f"line {line}: {own} imports {target} ({theirs})"
            for line, target in imports(source, module, is_package)
            if (theirs := layer(target)) is not None and theirs not in ALLOWED[own]]


SOURCES = sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path: Path) -> None:
    bad = violations(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    assert not bad, f"{path.relative_to(ROOT)}: " + "; ".join(bad)


def test_every_source_file_is_checked() -> None:
    assert len(SOURCES) > 50
    assert {layer(module_name(p)) for p in SOURCES} == {"core", "serve", "client", "judges", "top"}


def test_an_import_inside_a_function_is_seen() -> None:
    source = "def f():\n    from userturn.judges.panel import JudgePanel\n    return JudgePanel\n"
    assert violations(source, "userturn.client.pipeline") == [
        "line 2: client imports userturn.judges.panel (judges)"]


def test_type_checking_and_relative_imports_are_seen() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..client import endpoint\n"
              "from . import launcher\n")
    assert violations(source, "userturn.serve.cli") == ["line 3: serve imports userturn.client (client)"]


def test_the_core_may_not_reach_up() -> None:
    assert violations("import userturn.cli\n", "userturn.records") == ["line 1: core imports userturn.cli (top)"]
    assert violations("from userturn import cli\n", "userturn.jsonl") == ["line 1: core imports userturn.cli (top)"]
    assert violations("from userturn import records\n", "userturn.serve.launcher") == []
