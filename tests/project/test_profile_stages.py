"""benchmarks/profile_stages.py: py-spy stacks counted once each, for their most specific stage."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from profile_stages import STARTUP, stage_shares

LOOP = "<module> (userturn:1);Runner.run (asyncio/runners.py:118)"
STACKS = "\n".join([
    "<module> (userturn:1);_find_and_load (<frozen importlib._bootstrap>:1165) 10",  # before the loop: start-up
    f"{LOOP};ProbeRun._worker (client/probe/pipeline.py:155);ProbeRun._jobs (client/probe/pipeline.py:44);"
    "PromptRenderer._render (client/render/templates.py:290);root (<template>:30) 30",  # render inside the jobs
    f"{LOOP};ProbeRun._worker (client/probe/pipeline.py:155);ProbeRun._jobs (client/probe/pipeline.py:44) 5",
    f"{LOOP};ProbeRun._worker (client/probe/pipeline.py:155);RequestBuilder.probe (client/probe/requests.py:120);"
    "Endpoint.post_json (client/http/endpoint.py:330);AsyncRetrying.__anext__ (tenacity/asyncio/__init__.py:10) 15",
    f"{LOOP};ProbeRun._worker (client/probe/pipeline.py:155);RequestBuilder.probe (client/probe/requests.py:120);"
    "Endpoint.post_json (client/http/endpoint.py:330);Endpoint._attempt (client/http/endpoint.py:245);"
    "send (userturn/client/http/http_client.py:124);AsyncClient.send (httpx/_client.py:1594) 40",  # wheel layout
])


def test_each_stack_counts_once_for_its_most_specific_stage() -> None:
    shares = dict(stage_shares(STACKS))
    assert shares == {"HTTP client: httpx + aiohttp (as the raw loop)": 0.40, "chat template render": 0.30,
                      "retry policy (tenacity)": 0.15, STARTUP: 0.10,
                      "jobs: keys, fields, seeds, scores (rest of _jobs)": 0.05}
    assert next(stage for stage, _ in stage_shares(STACKS)) == "HTTP client: httpx + aiohttp (as the raw loop)"
