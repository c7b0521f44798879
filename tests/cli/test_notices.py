"""userturn/cli/notices.py, and the rule it serves: the orchestration (userturn/orchestrate/) never prints; it logs
one-line notices to the `userturn` logger, which the command line shows on stderr."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from userturn.cli import notices
from userturn.core.options import ProbeOptions
from userturn.orchestrate.run_builder import warn_greedy_samples

ROOT = Path(__file__).resolve().parents[2]


def printing_lines(source: str) -> list[int]:
    """Lines that call print(...), X.print(...) or write to sys.stdout / sys.stderr."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name == "print" or name.endswith(".print") or name in ("sys.stdout.write", "sys.stderr.write"):
            lines.append(node.lineno)
    return lines


def test_printing_is_seen() -> None:
    assert printing_lines("print('x')\n") == [1]
    assert printing_lines("import sys\nsys.stderr.write('x')\n") == [2]
    assert printing_lines("console.print(table)\n") == [1]
    assert printing_lines("path.write_text('x')\nlog.info('x')\n") == []


@pytest.mark.parametrize("path", sorted((ROOT / "userturn" / "orchestrate").rglob("*.py")),
                         ids=lambda p: p.name)
def test_the_orchestration_never_prints(path: Path) -> None:
    assert printing_lines(path.read_text(encoding="utf-8")) == [], f"{path.name}: log a notice or return a value"


def test_the_command_line_shows_each_notice_as_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    logger = logging.getLogger(notices.LOGGER)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        notices.install()
        notices.install()  # once per process: a second call adds no second handler
        assert sum(isinstance(h, notices.StderrLines) for h in logger.handlers) == 1
        warn_greedy_samples(ProbeOptions(temperatures=[0.0], samples=3))
        logging.getLogger("userturn").info("posttrain: %s done in %.1fs", "export", 1.25)
        err = capsys.readouterr().err.splitlines()
        assert err == ["userturn: warning: 3 samples per item at temperature 0 repeat one greedy generation 3 times "
                       "(3x the compute, no new information); sample at a temperature > 0, or ask 1 sample at T=0",
                       "posttrain: export done in 1.2s"]
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
