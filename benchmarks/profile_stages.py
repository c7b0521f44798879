"""Where a profiled `userturn probe` spends its time, by stage: py-spy's raw stacks (`py-spy record --format raw`,
one `frame;frame;... count` line per distinct stack) attributed to the probe's stages.

Each stack counts once, for the first stage in `STAGES` that one of its frames matches (the most specific first:
a render inside the job generator is the render's). The stages shared with the raw loop (the HTTP client, the event
loop's I/O callbacks) are named as such: the rest is what userturn adds per request, and at start-up.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

EVENT_LOOP = "Runner.run (asyncio/runners.py"
# (stage, mark): a stack is in the stage when one of its frames holds every substring of the mark; tried in order.
# Paths are matched by their tail: py-spy shortens them (client/..., or site-packages/userturn/client/... in a
# wheel install).
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("chat template render", ("PromptRenderer._render (",)),
    ("dataset re-read (lazy dataset)", ("JsonlItems.read_tagged (",)),
    ("HTTP client: httpx + aiohttp (as the raw loop)", ("send (", "client/http/http_client.py")),
    ("retry policy (tenacity)", ("tenacity/",)),
    ("per-attempt deadline (asyncio.timeout)", ("asyncio/timeouts.py",)),
    ("reply checks (Endpoint._reply_data)", ("Endpoint._reply_data (",)),
    ("endpoint bookkeeping (rest of Endpoint.post_json)", ("Endpoint.post_json (",)),
    ("record write (JSON line)", ("RecordWriter.write (",)),
    ("record build and request body (rest of probe)", ("RequestBuilder.probe (",)),
    ("jobs: keys, fields, seeds, scores (rest of _jobs)", ("ProbeRun._jobs (",)),
    ("worker loop (rest of ProbeRun._worker)", ("ProbeRun._worker (",)),
    ("event loop and I/O callbacks (as the raw loop)", (EVENT_LOOP,)),
]
STARTUP = "start-up and exit (outside the event loop)"


def stage_of(frames: list[str]) -> str:
    """The stage a stack (outermost frame first) counts for."""
    if not any(EVENT_LOOP in frame for frame in frames):
        return STARTUP
    for stage, mark in STAGES:
        if any(all(part in frame for part in mark) for frame in frames):
            return stage
    return "other"


def stage_shares(raw_stacks: str) -> list[tuple[str, float]]:
    """(stage, share of all samples) for the stages that have samples, largest first."""
    counts: Counter[str] = Counter()
    for line in raw_stacks.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[stage_of(stack.split(";"))] += int(count)
    total = sum(counts.values()) or 1
    return [(stage, n / total) for stage, n in counts.most_common()]


def print_stages(path: Path) -> None:
    print("\nuserturn probe, py-spy, samples by stage (a stack counts for its most specific stage):")
    for stage, share in stage_shares(path.read_text()):
        print(f"  {100 * share:5.1f}%  {stage}")
