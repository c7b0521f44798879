"""Words that match the code: every dotted module name (`userturn.core.records`, `judges.panel.JudgePanel`,
`client.http.endpoint`, ...) and every source path (`client/probe/pipeline.py`, `tests/project/test_layers.py`, ...)
written
in README.md, docs/*.md, and the docstrings and comments of the source, tests and benchmarks names something that
exists. Names are resolved on the source with `ast`, nothing is imported: a module is a file of its folder, a name
after it one that the module defines (a function, class, assignment or import) or a submodule, a name after a class
one that its body defines. Paths with placeholders (`NAME.py`, `judge_vN.md`) are recipes, not names."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"client": "client", "serve": "serve", "judges": "judges", "core": "userturn/core",
            "report": "userturn/report", "orchestrate": "userturn/orchestrate", "cli": "userturn/cli"}
PATH_ROOTS = ("client", "serve", "judges", "userturn", "tests", "benchmarks", "docs", "manifests", "experiments")
SOURCE = ("client", "serve", "judges", "userturn", "tests", "benchmarks")
DOTTED = re.compile(rf"(?<![\w./\\-])(?:userturn\.)?(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(rf"(?<![\w./\\-])(?:{'|'.join(PATH_ROOTS)})/[\w./-]*")
FILE_ENDINGS = (".md", ".py", ".yaml", ".yml", ".json", ".jsonl", ".txt", ".html", ".csv", ".toml", ".sh", ".gguf")
PLACEHOLDER = re.compile(r"NAME|vN|\bX\b|…|\*")


def module_file(dotted: str) -> Path | None:
    """The source file of `userturn.a.b` (a module or a package's __init__), else None."""
    parts = dotted.split(".")
    if parts[0] == "userturn":
        parts = parts[1:]
    if not parts:
        return ROOT / "userturn" / "__init__.py"
    folder = ROOT / PACKAGES[parts[0]] if parts[0] in PACKAGES else ROOT / "userturn" / parts[0]
    base = folder.joinpath(*parts[1:]) if parts[0] in PACKAGES else ROOT.joinpath("userturn", *parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def defined(path: Path) -> dict[str, ast.AST | None]:
    """Top-level names a module defines (a class maps to its node, for its members)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return _names(tree.body)


def _names(body: list[ast.stmt]) -> dict[str, ast.AST | None]:
    names: dict[str, ast.AST | None] = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _names([*node.body, *getattr(node, "orelse", []),
                             *(s for h in getattr(node, "handlers", []) for s in h.body)])
    return names


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        if parts[:cut] == ["userturn"] or parts[cut - 1] == "":
            continue
        path = module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        node: ast.AST | None = None
        names = defined(path)
        for i, name in enumerate(rest):
            if name not in names:
                return i > 0 and node is None  # an attribute of a value (not a class) cannot be checked
            node = names[name]
            if not isinstance(node, ast.ClassDef):
                return True
            names = _names(node.body)
        return True
    return False


def texts() -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of the words: README and docs whole; docstrings and comments of the Python files."""
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
            yield md.relative_to(ROOT).as_posix(), number, line
    for folder in SOURCE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            source = path.read_text(encoding="utf-8")
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if tok.type == tokenize.COMMENT:
                    yield rel, tok.start[0], tok.string
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=False)
                    if doc and node.body:
                        yield rel, node.body[0].lineno, doc


def stale() -> list[str]:
    found = []
    for where, line, text in texts():
        for match in DOTTED.finditer(text):
            name = match.group().rstrip(".")
            if name.endswith(FILE_ENDINGS) or PLACEHOLDER.search(name):
                continue
            if not resolves(name):
                found.append(f"{where}:{line}: {name}")
        for match in PATH.finditer(text):
            name = match.group().rstrip(".,:;)")
            if PLACEHOLDER.search(name) or "<" in name:
                continue
            if not (ROOT / name).exists():
                found.append(f"{where}:{line}: {name}")
    return found


def test_every_dotted_name_and_path_in_the_words_resolves() -> None:
    assert stale() == []


def test_the_check_finds_a_moved_module_and_a_missing_file() -> None:
    assert resolves("userturn.core.records.ProbeRecord.model_dump_json") is False  # pydantic's, not in the body
    assert resolves("userturn.core.records.ProbeRecord") and resolves("core.records.record_key")
    assert resolves("judges.panel.JudgePanel.judge") and resolves("serve.engines.ENGINES")
    assert not resolves("judges.stats") and not resolves("client.endpoint")
    assert [m.group() for m in PATH.finditer("see tests/test_help.py and client/probe/pipeline.py.")] == [
        "tests/test_help.py", "client/probe/pipeline.py."]
