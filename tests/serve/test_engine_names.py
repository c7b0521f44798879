"""No engine kind is named outside its definition (`serve/engines/`): every other module asks the registry
(`userturn.serve.engines.ENGINES`) or the definition's attributes, so an engine is one module and a registry line.

Checked on the source with `ast`: a string constant that is a kind (`"sglang"`), or that names one in quotes inside
a message (`"engine 'sglang' ..."`), fails naming the file and line. A kind inside a list of Python packages
(`("torch", "transformers")`: the library, not the engine) is not a name of the engine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from userturn.serve.engines import ENGINES

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("client", "serve", "judges", "userturn")
# Where a kind may be written: the definitions and their registry; the traits of an endpoint given by URL, which
# the client needs without importing serve (`EXTERNAL`); the router's own kind (an sglang-router, not an engine).
ALLOWED = {"serve/engines", "userturn/core/engine_traits.py"}
ROUTER_KIND = ("serve/manifest.py", "sglang")


def _package_lists(tree: ast.AST) -> set[int]:
    """ids of the string constants inside a tuple/list that also holds a string that is no kind (package lists)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List)):
            strings = [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if any(s.value not in ENGINES for s in strings):
                inside |= {id(s) for s in strings}
    return inside


def engine_names(path: Path, source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in `source` that names an engine kind."""
    quoted = re.compile("|".join(rf"'{re.escape(kind)}'" for kind in ENGINES))
    tree = ast.parse(source, str(path))
    packages = _package_lists(tree)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
            continue
        if (node.value in ENGINES and id(node) not in packages) or quoted.search(node.value):
            found.append((node.lineno, node.value))
    return sorted(found)


def offenders() -> list[str]:
    out = []
    for folder in SOURCE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if any(rel == allowed or rel.startswith(allowed + "/") for allowed in ALLOWED):
                continue
            for line, text in engine_names(path, path.read_text(encoding="utf-8")):
                if (rel, text) != ROUTER_KIND:
                    out.append(f"{rel}:{line}: {text!r}")
    return out


def test_no_engine_kind_is_named_outside_its_definition() -> None:
    assert offenders() == []


def test_the_check_finds_a_kind_written_as_a_value_or_in_a_message(tmp_path: Path) -> None:
    source = ('"""A docstring may say sglang."""\n'
              'LIBS = ("torch", "transformers")\n'
              'def f(m):\n'
              '    if m.engine == "sglang":\n'
              '        raise ValueError("multi-node needs engine \'vllm\'")\n'
              '    return ("sglang", "vllm")\n')
    assert engine_names(tmp_path / "x.py", source) == [(4, "sglang"), (5, "multi-node needs engine 'vllm'"),
                                                       (6, "sglang"), (6, "vllm")]
