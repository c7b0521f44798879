"""The same probe run writes the same records release after release (issue 27: the package layout moved, the
records did not): a fixed run through `userturn probe` against a mock server with fixed seeds, compared line by line
with tests/fixtures/golden/*.jsonl apart from what a clock or a machine decides (latency, start times, host).

Regenerate the golden file only for an intended change of the records:
UPDATE_GOLDEN=1 pytest tests/probe/test_golden_probe.py
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_process import QWEN_DIR
from mock_http import MockServer, completion_handler

from userturn.cli import main

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden"
# Decided by the clock, the machine or the temporary folder, never by the probe's logic.
VOLATILE = {"latency_s", "started_at", "finished_at", "created_at", "time", "timestamp", "host", "hostname", "pid",
            "userturn_version", "python", "platform", "out", "out_path", "dataset_path", "tokenizer", "ttft_s",
            "wall_s", "elapsed_s", "now", "command", "started"}


def answer(body: dict[str, Any]) -> str:
    """Deterministic text from the request: which prompt, which seed, which sampling."""
    prompt = body.get("prompt") or json.dumps(body.get("messages"), sort_keys=True)
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
    return f"Why {digest}? seed={body.get('seed')} t={body.get('temperature')} m={body.get('max_tokens')}<|im_end|>"


def normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in sorted(value.items()) if k not in VOLATILE}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    return value


def write_dataset(path: Path) -> Path:
    rows = []
    for i in range(4):
        msgs = [{"role": "user", "content": f"Natalia sold {i} clips in April and twice as many in May. How many?"},
                {"role": "assistant", "content": f"She sold {3 * i} clips altogether. #### {3 * i}"}]
        rows.append({"id": f"q{i}", "answer": str(3 * i), "messages": msgs})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def probe_lines(tmp_path: Path, *extra: str) -> list[Any]:
    data = write_dataset(tmp_path / "golden.jsonl")
    out = tmp_path / "out.jsonl"
    with MockServer(completion_handler(answer, model="golden")) as server:
        code = main(["probe", "--base-url", server.base_url, "--model", "golden", "--tokenizer", QWEN_DIR,
                     "--dataset", str(data), "--out", str(out), "--seed", "11", "--samples", "2",
                     "--temperature", "0.5", "--temperature", "1.0", "--max-tokens", "24", "--no-progress",
                     *[f for name in ("none", "wrong_answer", "truncate", "swap", "remove", "generic")
                       for f in ("--perturb", name)], *extra])
    assert code == 0
    return sorted((normalise(json.loads(line)) for line in out.read_text().splitlines()),
                  key=lambda row: json.dumps(row, sort_keys=True))


@pytest.mark.parametrize(("name", "flags"), [
    ("probe", []),
    ("assistant-from-model", ["--assistant-from", "model", "--assistant-temperature", "0.3"]),
    ("chat", ["--mode", "chat"]),
])
def test_the_probe_writes_the_golden_records(tmp_path: Path, name: str, flags: list[str]) -> None:
    lines = probe_lines(tmp_path, *flags)
    golden_file = GOLDEN / f"{name}.jsonl"
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in lines)
    if os.environ.get("UPDATE_GOLDEN"):
        golden_file.write_text(text)
    golden = golden_file.read_text().splitlines()
    assert len(lines) == len(golden) > 40
    for got, want in zip(text.splitlines(), golden, strict=True):
        assert json.loads(got) == json.loads(want)
