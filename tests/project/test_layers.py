"""The import direction between layers (README "Code map"), decided by the folder a module lives in and checked on
every import statement in the source, including imports inside functions and under TYPE_CHECKING.

    core        (userturn/core/)         imports nothing else of userturn
    serve       (serve/ -> userturn.serve)   core
    client      (client/ -> userturn.client) core
    judges      (judges/ -> userturn.judges) core, client
    report      (userturn/report/)       core, client, judges
    orchestrate (userturn/orchestrate/)  core, client, serve, judges, report
    cli         (userturn/cli/)          everything but the package's own front door
    top         (userturn/__init__.py, userturn/__main__.py)  everything

argparse appears only under userturn/cli/, and in the modules that are a process of their own (`python -m ...`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"userturn": "userturn", "client": "userturn.client", "serve": "userturn.serve", "judges": "userturn.judges",
           "manifests": "userturn.manifests", "experiments": "userturn.experiments"}
LAYERS = {"userturn.core": "core", "userturn.cli": "cli", "userturn.orchestrate": "orchestrate",
          "userturn.serve": "serve", "userturn.client": "client", "userturn.judges": "judges",
          "userturn.report": "report", "userturn.manifests": "data", "userturn.experiments": "data"}
ALLOWED = {"core": {"core"}, "data": set(), "serve": {"core", "serve"}, "client": {"core", "client"},
           "judges": {"core", "client", "judges"},
           "report": {"core", "client", "judges", "report"},
           "orchestrate": {"core", "serve", "client", "judges", "report", "orchestrate"},
           "cli": {"core", "serve", "client", "judges", "report", "orchestrate", "cli", "data"},
           "top": {"core", "serve", "client", "judges", "report", "orchestrate", "cli", "data", "top"}}
# Modules started as a process of their own (`python -m userturn.serve.X`): each may parse its own argv.
OWN_PROCESS = {"serve/cpu_engine.py", "serve/slurm_job.py", "serve/tiny_model.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = FOLDERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str | None:
    """The layer a dotted module name belongs to, from its folder; None outside userturn."""
    if module != "userturn" and not module.startswith("userturn."):
        return None
    for prefix, name in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return name
    return "top"


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
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names
                      if base == "userturn" or base.startswith("userturn.")]
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    own = layer(module)
    assert own is not None
    found = [(line, target) for line, target in imports(source, module, is_package)]
    bad = []
    for line, target in found:
        theirs = layer(target)
        if theirs is None or theirs in ALLOWED[own]:
            continue
        # `from userturn.core import errors` names the package, then the module: the module decides; a name under
        # a package already reported on that line is not reported again.
        if any(other == line and o_target.startswith(target + ".") and layer(o_target) in ALLOWED[own]
               for other, o_target in found):
            continue
        if any(b.startswith(f"line {line}: {own} imports {target.rpartition('.')[0]} (") for b in bad):
            continue
        bad.append(f"line {line}: {own} imports {target} ({theirs})")
    return bad


def argparse_lines(source: str) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(source))
            if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in node.names))
            or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse")]


SOURCES = sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", SOURCES, ids=relative)
def test_imports_follow_the_layers(path: Path) -> None:
    bad = violations(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    assert not bad, f"{relative(path)}: " + "; ".join(bad)


@pytest.mark.parametrize("path", SOURCES, ids=relative)
def test_argparse_only_in_the_cli(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    if relative(path).startswith("userturn/cli/"):
        return
    if relative(path) in OWN_PROCESS:
        assert 'if __name__ == "__main__":' in source, f"{relative(path)} is no process of its own"
        return
    lines = argparse_lines(source)
    assert not lines, f"{relative(path)}: argparse outside userturn/cli (lines {lines})"


def test_every_source_file_is_checked() -> None:
    assert len(SOURCES) > 50
    assert {layer(module_name(p)) for p in SOURCES} == set(ALLOWED)
    assert all(layer(module_name(p)) == "core" for p in (ROOT / "userturn" / "core").rglob("*.py"))


def test_an_import_inside_a_function_is_seen() -> None:
    source = "def f():\n    from userturn.judges.panel import JudgePanel\n    return JudgePanel\n"
    assert violations(source, "userturn.client.probe.pipeline") == [
        "line 2: client imports userturn.judges.panel (judges)"]


def test_type_checking_and_relative_imports_are_seen() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..client import endpoint\n"
              "from . import launcher\n")
    assert violations(source, "userturn.serve.launcher") == [
        "line 3: serve imports userturn.client (client)"]


def test_the_core_may_not_reach_up() -> None:
    assert violations("import userturn.cli\n", "userturn.core.records") == ["line 1: core imports userturn.cli (cli)"]
    assert violations("from userturn import cli\n", "userturn.core.jsonl") == ["line 1: core imports userturn (top)"]
    assert violations("from userturn import __version__\n", "userturn.core.fingerprint") == [
        "line 1: core imports userturn (top)"]
    assert violations("from userturn.client.data import dataset\n", "userturn.core.records") == [
        "line 1: core imports userturn.client.data (client)"]
    assert violations("from userturn.core import records\n", "userturn.serve.launcher") == []
    assert violations("from userturn.core import errors\n", "userturn.core.files") == []


def test_the_lower_layers_never_reach_the_cli_or_orchestration() -> None:
    for lower in ("userturn.client.probe.pipeline", "userturn.serve.launcher", "userturn.judges.panel"):
        assert violations("from userturn.cli.probe import load_items\n", lower)
        assert violations("import userturn.orchestrate.experiment\n", lower)
    assert violations("from userturn.cli import app\n", "userturn.orchestrate.run_builder")


def test_argparse_is_seen_anywhere() -> None:
    assert argparse_lines("def f():\n    import argparse\n") == [2]
    assert argparse_lines("from argparse import Namespace\n") == [1]
    assert argparse_lines('"""argparse types"""\n') == []
