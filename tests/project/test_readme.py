"""The README stays true: its test command is CI's and its Python examples import what exists (the flags and the
record fields are checked against docs/cli.md and docs/results-format.md: tests/cli/test_cli_reference.py,
tests/project/test_results_format_doc.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def first_commands() -> list[str]:
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_starts_with_two_commands_and_ci_runs_the_second():
    commands = first_commands()
    assert len(commands) == 2
    assert "userturn run experiments/smoke.yaml" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    marker = ci.index("# The README's test command (keep the two identical):")
    assert ci[marker + 1] == commands[1]
    assert (ROOT / "experiments" / "smoke.yaml").is_file()


def test_python_api_examples_import_from_the_package():
    """The README's Python API examples import from `userturn` itself, and every name they import is there."""
    import importlib

    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.startswith(("from ", "import "))]
    assert any(line.startswith("from userturn import ") for line in lines)
    for line in lines:
        module, _, names = line.partition(" import ")
        module = module.removeprefix("from ").strip()
        assert module.startswith("userturn"), line
        imported = importlib.import_module(module)
        for name in names.split(","):
            assert hasattr(imported, name.strip()), line
