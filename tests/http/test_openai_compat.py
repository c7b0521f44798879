"""Wire-format conformance: the official openai SDK (2.x) against the embedded CPU engine, and the probe
CLI end to end against it (launch -> health -> raw completion ending at the user header -> JSONL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from userturn.core.jsonl import read_records

pytestmark = pytest.mark.slow

PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n"


async def test_sdk_parses_engine_completions_and_chat(cpu_engine_server):
    client = openai.AsyncOpenAI(base_url=cpu_engine_server.base_urls[0], api_key="unused", max_retries=0)
    try:
        models = await client.models.list()
        assert [m.id for m in models.data] == [cpu_engine_server.model_name]
        completion = await client.completions.create(
            model=cpu_engine_server.model_name, prompt=PROMPT, max_tokens=8, temperature=0.7, seed=3, n=2,
            stop=["<|im_end|>"],
        )
        assert len(completion.choices) == 2
        assert all(c.finish_reason in ("stop", "length") and isinstance(c.text, str) for c in completion.choices)
        assert completion.usage.prompt_tokens > 0
        again = await client.completions.create(
            model=cpu_engine_server.model_name, prompt=PROMPT, max_tokens=8, temperature=0.7, seed=3, n=2,
            stop=["<|im_end|>"],
        )
        assert [c.text for c in again.choices] == [c.text for c in completion.choices]  # seeded sampling
        chat = await client.chat.completions.create(
            model=cpu_engine_server.model_name, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        )
        assert chat.choices[0].message.role == "assistant" and isinstance(chat.choices[0].message.content, str)
    finally:
        await client.close()


def test_probe_cli_against_the_embedded_engine(cpu_engine_server, tiny_model_dir: Path, tmp_path: Path):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "What is 2+2?"},
                                                         {"role": "assistant", "content": "4"}]}) + "\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "userturn", "probe", "--base-url", cpu_engine_server.base_urls[0],
         "--model", cpu_engine_server.model_name, "--dataset", str(data), "--out", str(out),
         "--tokenizer", str(tiny_model_dir), "--temperature", "0", "--temperature", "1", "--samples", "2",
         "--max-tokens", "8", "--send-stop-token-ids", "--no-progress"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OPENAI_API_KEY": ""},
    )
    assert proc.returncode == 0, proc.stderr
    records, _ = read_records(out)
    assert len(records) == 4 and all(r.status == "ok" for r in records.values())
    assert all(r.finish_reason in ("stop", "length") and r.user_turn is not None for r in records.values())
    assert all(r.usage and r.usage.prompt_tokens for r in records.values())
