"""The shared input readers (userturn/core/files.py), argparse types (userturn/cli/argtypes.py), event loop (aio.py)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from userturn.cli import argtypes
from userturn.core import aio
from userturn.core.errors import UserError
from userturn.core.files import jsonl_objects, read_yaml_mapping


def test_yaml_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\nb: [\n")
    with pytest.raises(UserError, match=rf"^{path}:3: invalid YAML: "):
        read_yaml_mapping(path)
    path.write_text("- a\n")
    with pytest.raises(UserError, match=rf"^{path}: expected a mapping of keys at the top level, got list$"):
        read_yaml_mapping(path)
    with pytest.raises(UserError, match=rf"^{tmp_path / 'x.yaml'}: manifest not found$"):
        read_yaml_mapping(tmp_path / "x.yaml", "manifest")
    path.write_text("a: 1\n")
    assert read_yaml_mapping(path) == {"a": 1}


def test_jsonl_objects_skip_blank_lines_and_name_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n{"b": 2}\n')
    assert list(jsonl_objects(path)) == [(1, {"a": 1}), (3, {"b": 2})]
    path.write_text('{"a": 1}\n[1]\n')
    with pytest.raises(UserError, match=rf"^{path}:2: expected a JSON object, got list$"):
        list(jsonl_objects(path))
    path.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(UserError, match=rf"^{path}:2: invalid JSON \("):
        list(jsonl_objects(path))
    path.write_text('{"a": 1}\n{"b": "' + "x" * 20 + '"}\n')
    assert len(list(jsonl_objects(path, max_line_bytes=40))) == 2
    with pytest.raises(UserError, match=rf"^{path}:2: line longer than 20 bytes$"):
        list(jsonl_objects(path, max_line_bytes=20))


@pytest.mark.parametrize(("kind", "text", "message"), [
    (argtypes.positive_int, "0", "must be at least 1, got 0"),
    (argtypes.positive_int, "x", "expected an integer, got 'x'"),
    (argtypes.non_negative_float, "-1", "must be 0 or more"),
    (argtypes.positive_float, "inf", "must be a finite number"),
    (argtypes.probability, "1.5", "must be above 0 and at most 1, got 1.5"),
    (argtypes.probability, "0", "must be above 0 and at most 1"),
    (argtypes.at_least(16, " (why)"), "5", r"must be at least 16 \(why\), got 5"),
    (argtypes.json_object, "[1]", "must be a JSON object, got list"),
])
def test_bad_flag_values_are_refused_not_clamped(kind, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        kind(text)


def test_a_huge_integer_is_a_value_not_a_traceback() -> None:
    huge = "1" + "0" * 400  # math.isfinite would overflow on it
    assert argtypes.positive_int(huge) == 10**400 and argtypes.non_negative_int(huge) == 10**400


def test_every_command_runs_on_one_loop_policy() -> None:
    """`aio.run` runs on uvloop, and no module starts an event loop any other way (checked on the source): every
    command's loop is `aio.run`'s. The CPU engine, a process of its own, runs aiohttp's server loop."""
    import ast

    async def loop_name() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert aio.run(loop_name()).startswith("uvloop")
    root = Path(__file__).resolve().parents[2]
    starters = {"run", "Runner", "new_event_loop", "run_until_complete", "run_forever", "run_app"}
    own = {"userturn/core/aio.py", "serve/cpu_engine.py"}
    found = []
    for folder in ("client", "serve", "judges", "userturn"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)) or rel in own:
                    continue
                owner = ast.unparse(node.func.value)
                if node.func.attr in starters and owner != "aio" and (node.func.attr != "run" or owner == "asyncio"):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}")
    assert found == []


def test_one_cache_root_for_every_derived_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from userturn.core.files import cache_root

    monkeypatch.setenv("USERTURN_CACHE_DIR", "~/uc")
    assert cache_root() == Path("~/uc").expanduser()
    monkeypatch.delenv("USERTURN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "userturn"
