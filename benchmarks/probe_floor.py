"""The CPU floor of one probe request: what `userturn probe` must do per request besides moving bytes, measured in
this process without any network, against the allowance each throughput target of issue 26 leaves.

Both clients of `bench_probe.py` are CPU-bound on a 2-core machine, so a target ratio r caps userturn's CPU per
request at raw / r: its work beyond the raw loop's may take at most raw x (1/r - 1) microseconds ("allowance").
The floor sums the pieces that work cannot do without, each through the code the probe runs:

* the retry policy: one `tenacity.AsyncRetrying` per request whose first attempt succeeds (issue 26: one tenacity
  policy, no hand-written first attempt beside it);
* the per-attempt deadline (`asyncio.timeout`);
* the render of one GSM8K-sized Qwen3 prompt (`PromptRenderer.user_turn_prompt`; shared by ten samples per item);
* the record: `ProbeRecord(...)` from its fields and its JSON line (`model_dump_json`).

    .venv/bin/python benchmarks/probe_floor.py --raw-us 560      # allowance from the raw loop's CPU per request

Everything else the probe does per request (seeds, keys, reply checks, counters, the dataset re-read, garbage
collection) comes on top, so a floor above an allowance means that target cannot be met on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

TARGETS = [("10 samples, c=64 / 0 ms", 10, 0.8), ("10 samples, c=256 / 50 ms", 10, 0.9),
           ("1 sample, c=64 / 0 ms", 1, 0.7), ("1 sample, c=256 / 50 ms", 1, 0.9)]


def per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Median over `rounds` of the process time per call of `fn`, in microseconds."""
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        times.append((time.process_time() - start) / calls * 1e6)
    return statistics.median(times)


def async_per_call_us(make: Callable[[], object], calls: int, rounds: int) -> float:
    """The same for a coroutine function, all calls awaited in one event loop (uvloop, as the probe)."""
    import uvloop

    async def loop() -> float:
        start = time.process_time()
        for _ in range(calls):
            await make()  # type: ignore[misc]
        return (time.process_time() - start) / calls * 1e6

    return statistics.median(uvloop.run(loop()) for _ in range(rounds))


def retry_policy() -> Callable[[], object]:
    """One request's tenacity loop as `Endpoint.post_json` builds it, around an attempt that succeeds at once."""
    from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

    from userturn.core.errors import RetryableError

    retry_if, stop = retry_if_exception_type(RetryableError), stop_after_attempt(6)
    wait = wait_exponential_jitter(multiplier=1.0, max=30.0, jitter=1.0)

    async def attempt() -> dict[str, int]:
        return {"ok": 1}

    async def request() -> dict[str, int]:
        async for try_ in AsyncRetrying(retry=retry_if, stop=stop, wait=wait, reraise=True, before_sleep=print):
            with try_:
                return await attempt()
        raise AssertionError("unreachable")

    return request


def deadline() -> tuple[Callable[[], object], Callable[[], object]]:
    """A request's per-attempt deadline around an await, and the same await without it."""

    async def request() -> None:
        async with asyncio.timeout(300.0):
            await asyncio.sleep(0)

    async def bare() -> None:
        await asyncio.sleep(0)

    return request, bare


def render_and_record() -> tuple[Callable[[], object], Callable[[], object]]:
    """A render of the benchmark's conversation, and the record of one sample of it with its JSON line."""
    import tempfile

    from bench_probe import tokenizer_dir, write_dataset

    from userturn.client.render.templates import PromptRenderer
    from userturn.core.records import Message, ProbeRecord

    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "d.jsonl"
        write_dataset(dataset, 1)
        import json

        line = json.loads(dataset.read_text())
    messages = [Message(**m) for m in line["messages"]]
    renderer = PromptRenderer.load(str(tokenizer_dir()))
    renderer.user_turn_prompt(messages, cache=False)  # warm
    fields = {"key": "k" * 16, "status": "ok", "config_fingerprint": "f" * 16, "model": "bench", "dataset": "d",
              "item_id": "q0", "temperature": 1.0, "sample": 0, "seed": 123456789, "messages": messages,
              "prompt_sha256": "a" * 64, "template_sha256": "b" * 64, "user_turn": "Thanks! Why step 3?",
              "finish_reason": "stop", "matched_stop": "<|im_end|>", "latency_s": 0.01, "attempts": 1,
              "usage": {"prompt_tokens": 300, "completion_tokens": 8, "total_tokens": 308}}
    return (lambda: renderer.user_turn_prompt(messages, cache=False)), (
        lambda: ProbeRecord(**fields).model_dump_json())


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--raw-us", type=float, action="append",
                        help="the raw loop's CPU per request (bench_probe.py's 'CPU us raw'), one per target in "
                             "the order printed, or one for all; default: only the floor is printed")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    retry_us = async_per_call_us(retry_policy(), args.calls, args.rounds)
    timed, bare = deadline()
    deadline_us = async_per_call_us(timed, args.calls, args.rounds) - async_per_call_us(bare, args.calls, args.rounds)
    render, record = render_and_record()
    render_us = per_call_us(render, args.calls // 5, args.rounds)
    record_us = per_call_us(record, args.calls, args.rounds)
    print(f"per request, process CPU time, median of {args.rounds} rounds:")
    for name, value in [("retry policy (tenacity, first attempt succeeds)", retry_us),
                        ("per-attempt deadline (asyncio.timeout)", deadline_us),
                        ("render of one Qwen3 prompt", render_us), ("record and its JSON line", record_us)]:
        print(f"  {name:<50} {value:7.1f} us")
    raw = args.raw_us or []
    if raw and len(raw) not in (1, len(TARGETS)):
        sys.exit(f"probe_floor: --raw-us takes 1 or {len(TARGETS)} values")
    print(f"\n  {'target':<34} {'floor us':>9} {'allowance us':>13}  floor within allowance")
    for i, (name, samples, ratio) in enumerate(TARGETS):
        floor = retry_us + deadline_us + render_us / samples + record_us
        if raw:
            us = raw[0] if len(raw) == 1 else raw[i]
            allowance = us * (1 / ratio - 1)
            within = "yes" if floor <= allowance else "NO"
            print(f"  {name + f' >= {ratio}x':<34} {floor:9.1f} {allowance:13.1f}  {within}")
        else:
            print(f"  {name + f' >= {ratio}x':<34} {floor:9.1f} {'-':>13}")


if __name__ == "__main__":
    main()
