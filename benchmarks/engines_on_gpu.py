"""For the first GPU a developer is lent: each installed engine loads a small model with dummy weights and answers
one seeded request twice; prints whether the two texts match (the engine's traits say whether they should) and
how long a batch of requests takes, so SGLang's deterministic mode can be costed.

    python benchmarks/engines_on_gpu.py [--model Qwen/Qwen3-0.6B] [--engines sglang,vllm,llamacpp] [--requests 64]

Needs the model's config and tokenizer (hub or cache; `load_format: dummy` means no weights are downloaded for
SGLang and vLLM); llama.cpp needs a GGUF (`--gguf PATH`) and `llama-server` on PATH. Engines that are not installed
are reported and skipped. Nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from userturn.core.errors import UserError
from userturn.serve.engines import engine_of
from userturn.serve.launcher import check_installed, launch
from userturn.serve.manifest import Manifest, parse_manifest

PROMPT = "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n"


def manifests(engine: str, model: str, gguf: str | None) -> list[Manifest]:
    """The engine's configurations worth comparing (SGLang: with and without deterministic inference)."""
    if engine == "llamacpp":
        if not gguf:
            return []
        return [parse_manifest({"name": "llamacpp", "engine": "llamacpp", "model": gguf, "gpus": 1, "seed": 0})]
    base = {"engine": engine, "model": model, "load_format": "dummy", "gpus": 1, "seed": 0,
            "mem_fraction_static": 0.5, "context_length": 4096}
    found = [parse_manifest({"name": engine, **base})]
    if engine == "sglang":
        found.append(parse_manifest({"name": "sglang-deterministic", **base, "deterministic": True}))
    return found


async def requests(url: str, key: str | None, model: str, n: int, seed: int) -> tuple[list[str], float]:
    """`n` concurrent seeded T=1 completions of one prompt -> (texts, seconds)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "prompt": PROMPT, "max_tokens": 64, "temperature": 1.0, "seed": seed}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, trust_env=False) as client:
        start = time.perf_counter()
        replies = await asyncio.gather(*(client.post("/completions", json=body) for _ in range(n)))
        elapsed = time.perf_counter() - start
    return [r.raise_for_status().json()["choices"][0]["text"] for r in replies], elapsed


def check(m: Manifest, n: int) -> None:
    import os

    traits = engine_of(m).engine_traits(m)
    with launch(m, status=None) as server:
        key = os.environ.get(server.api_key_env or "") or None
        (first,), _ = asyncio.run(requests(server.base_url, key, server.model_name, 1, 1234))
        (second,), _ = asyncio.run(requests(server.base_url, key, server.model_name, 1, 1234))
        texts, seconds = asyncio.run(requests(server.base_url, key, server.model_name, n, 1234))
    same = "identical" if first == second else "DIFFERENT"
    batch = len(set(texts))
    print(f"{m.label}: seeded request twice: {same} (traits: seed_honoured={traits.seed_honoured}); "
          f"{n} concurrent copies: {batch} distinct texts in {seconds:.2f} s ({n / seconds:.1f} req/s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--gguf", default=None, help="a GGUF file for llama.cpp")
    ap.add_argument("--engines", default="sglang,vllm,llamacpp")
    ap.add_argument("--requests", type=int, default=64)
    args = ap.parse_args()
    for engine in args.engines.split(","):
        for m in manifests(engine, args.model, args.gguf):
            try:
                check_installed(m)
                check(m, args.requests)
            except UserError as exc:
                print(f"{m.label}: skipped: {exc}", flush=True)


if __name__ == "__main__":
    main()
