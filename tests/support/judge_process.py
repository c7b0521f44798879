"""The stand-in judge server as a process, and `userturn` run as one."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from results_lines import record_lines

FIXTURES = Path(__file__).parents[1] / "fixtures" / "judges"


SERVER = FIXTURES / "judge_server.py"


class JudgeServer:
    def __init__(self, *flags: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", *flags], stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("READY "), line
        self.base_url = f"http://127.0.0.1:{int(line.split()[1])}/v1"

    def stats(self) -> dict:
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/stats", timeout=5) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def read(path: Path) -> dict[str, dict]:
    return {r["item_id"]: r for r in record_lines(path)}


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "userturn", *argv], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])
