"""The probe against a matrix of server behaviours on 127.0.0.1, not one shape: random shares of 429s, a fixed
window with and without Retry-After, Retry-After 0/1/3600, Debian's nginx `limit_req` with and without
`add_header Retry-After`, a slow but live server at concurrency 1 and 2, a share of items never answered, a server
loading forever. For each: nothing lost (every sample has a record, or the run stops in one line with exit 3 and a
rerun goes on), no error record that a wait would have avoided, and the wall time within a stated factor of what
the server itself allows. Time constants are the defaults divided by ten (backoff from 50 ms doubling to 3 s, a
10 s window becomes 1 s) and counts are small, so the matrix stays short.

`python tests/http/test_endpoint_matrix.py` runs every scenario once and prints the table recorded in docs/http.md."""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from chatml_renderer import Renderer
from nginx_process import nginx_limit_req

from userturn.client.data.dataset import DatasetItem
from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings
from userturn.core.errors import EndpointError
from userturn.core.jsonl import read_records

OK_BODY = {"choices": [{"index": 0, "text": "Could you say more?", "finish_reason": "stop"}]}
ITEM = re.compile(r"ITEM(\d+)END")
CHANCE_ERRORS = -1  # `Scenario.expect_exit` of a server whose errors are chance: exit 0 or 1, a few errors
Behaviour = Callable[["StandIn", int, int], Awaitable[web.Response]]


pytestmark = pytest.mark.usefixtures("fresh_network")


@dataclass
class StandIn:
    """An aiohttp completion server on a free loopback port whose every POST goes to `behave(server, item, n)`
    (n: the how-many-th request for that item, from 1)."""

    behave: Behaviour
    requests: int = 0
    answered: int = 0
    per_item: dict[int, int] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(11))
    window: list[float] = field(default_factory=list)  # start of the current window, requests let through in it
    runner: web.AppRunner | None = None
    root_url: str = ""

    async def _completion(self, request: web.Request) -> web.Response:
        body = await request.json()
        match = ITEM.search(str(body.get("prompt", "")))
        item = int(match.group(1)) if match else -1
        self.requests += 1
        self.per_item[item] = self.per_item.get(item, 0) + 1
        response = await self.behave(self, item, self.per_item[item])
        self.answered += response.status == 200
        return response

    async def __aenter__(self) -> StandIn:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_get("/v1/models", models)
        self.runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.root_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def models(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "m"}]})


def ok() -> web.Response:
    return web.json_response(OK_BODY)


def refused(retry_after: str | None = None) -> web.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else None
    return web.json_response({"error": {"message": "rate limit"}}, status=429, headers=headers)


def random_share(share: float) -> Behaviour:
    """A gateway refusing `share` of requests at random (seeded), whatever the load, without Retry-After."""
    async def behave(server: StandIn, item: int, n: int) -> web.Response:
        return refused() if server.rng.random() < share else ok()
    return behave


def fixed_window(per_window: int, window_s: float, *, retry_after: bool) -> Behaviour:
    """At most `per_window` answers per fixed window of `window_s`; the rest 429 (with Retry-After naming the
    window's end, rounded up to whole seconds as the header has it, when `retry_after`)."""
    async def behave(server: StandIn, item: int, n: int) -> web.Response:
        now = time.monotonic()
        if not server.window or now - server.window[0] >= window_s:
            server.window[:] = [now - (now - server.window[0]) % window_s if server.window else now, 0]
        if server.window[1] < per_window:
            server.window[1] += 1
            return ok()
        left = window_s - (now - server.window[0])
        return refused(str(math.ceil(left)) if retry_after else None)
    return behave


def always_refusing(retry_after: str) -> Behaviour:
    async def behave(server: StandIn, item: int, n: int) -> web.Response:
        return refused(retry_after)
    return behave


def slow_live(timeout: float) -> Behaviour:
    """Every request takes a time drawn from 0-2 timeouts (a hash of item and attempt): half time out."""
    async def behave(server: StandIn, item: int, n: int) -> web.Response:
        draw = int.from_bytes(hashlib.sha256(f"{item}/{n}".encode()).digest()[:4], "big") / 2**32
        await asyncio.sleep(2 * timeout * draw)
        return ok()
    return behave


def never_answered(every: int) -> Behaviour:
    """Every `every`-th item is never answered (a prompt that wedges the server); the rest at once."""
    async def behave(server: StandIn, item: int, n: int) -> web.Response:
        if item % every == 0:
            await asyncio.Event().wait()
        return ok()
    return behave


async def loading(server: StandIn, item: int, n: int) -> web.Response:
    return web.json_response({"error": {"message": "model loading"}}, status=503, headers={"Retry-After": "0"})


async def instant(server: StandIn, item: int, n: int) -> web.Response:
    return ok()


@dataclass
class Outcome:
    exit: int  # as the CLI would exit: 3 on EndpointError, 1 with error records, else 0
    ok: int
    errors: int
    wall_s: float
    line: str = ""


async def probe(base_url: str, n: int, out: Path, *, concurrency: int = 64, **config: object) -> Outcome:
    items = [DatasetItem.model_validate({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"ITEM{i}END"}, {"role": "assistant", "content": "Sure."}]}) for i in range(n)]
    settings = {"base_url": base_url, "backoff_initial": 0.05, "backoff_max": 3.0, "request_timeout": 5.0,
                **config}
    start = time.monotonic()
    line = ""
    async with Endpoint(EndpointConfig(**settings)) as ep:  # type: ignore[arg-type]
        run = ProbeRun(items, ProbeSettings(model="m", dataset="d", concurrency=concurrency), endpoints=[ep],
                       renderer=Renderer(), out_path=str(out), progress=False)
        try:
            await run.run()
        except EndpointError as exc:
            line = str(exc)
    wall = time.monotonic() - start
    records, _ = read_records(out) if out.exists() else ({}, None)
    good = sum(r.status == "ok" for r in records.values())
    errors = len(records) - good
    return Outcome(3 if line else 1 if errors else 0, good, errors, wall, line)


@dataclass
class Scenario:
    """One server behaviour: `capacity_s` is the least time the server itself allows for `n` answers; the run must
    take at most `factor` times that plus `slack_s` (start-up, the last backoff)."""

    name: str
    behave: Behaviour | None  # None: Debian's nginx in front of an instant stand-in
    n: int
    capacity_s: float
    factor: float
    expect_exit: int = 0
    concurrency: int = 64
    nginx_rate: int = 0
    nginx_retry_after: str | None = None
    config: dict[str, object] = field(default_factory=dict)
    slack_s: float = 3.0


SCENARIOS = [
    Scenario("429 at random, 15%", random_share(0.15), 200, 0.0, 1.0),
    Scenario("429 at random, 30%", random_share(0.30), 200, 0.0, 1.0),
    Scenario("429 at random, 50%", random_share(0.50), 100, 0.0, 1.0, slack_s=5.0),
    Scenario("fixed window 20/s, no Retry-After", fixed_window(20, 1.0, retry_after=False), 100, 4.0, 2.5),
    Scenario("fixed window 20/s, Retry-After", fixed_window(20, 1.0, retry_after=True), 100, 4.0, 2.5),
    Scenario("nginx limit_req 20 r/s", None, 60, 3.0, 2.0, nginx_rate=20),
    Scenario("nginx limit_req 20 r/s, Retry-After 0", None, 60, 3.0, 2.0, nginx_rate=20, nginx_retry_after="0"),
    # a Retry-After of 1 s is 20 of the limit's 50 ms intervals, and is honoured
    Scenario("nginx limit_req 20 r/s, Retry-After 1", None, 60, 3.0, 3.0, nginx_rate=20, nginx_retry_after="1"),
    Scenario("429 + Retry-After 3600 on every request", always_refusing("3600"), 50, 0.0, 1.0, expect_exit=3),
    Scenario("slow but live (0-2 timeouts), concurrency 1", slow_live(0.2), 20, 20 * 0.2, 3.0, concurrency=1,
             config={"request_timeout": 0.2}, expect_exit=CHANCE_ERRORS),
    Scenario("slow but live (0-2 timeouts), concurrency 2", slow_live(0.2), 20, 20 * 0.2 / 2, 3.0, concurrency=2,
             config={"request_timeout": 0.2}, expect_exit=CHANCE_ERRORS),
    Scenario("1 item in 10 never answered", never_answered(10), 100, 0.0, 1.0, expect_exit=1, concurrency=8,
             config={"request_timeout": 0.2, "max_retries": 2}, slack_s=6.0),
    Scenario("503 loading forever, Retry-After 0", loading, 20, 3.0, 1.0, expect_exit=3, concurrency=4,
             config={"loading_max_s": 3.0}),
]


async def run_scenario(scenario: Scenario, folder: Path) -> tuple[Outcome, StandIn]:
    """The outcome and the stand-in server (`requests` counts nginx's refusals too)."""
    out = folder / "out.jsonl"
    async with StandIn(scenario.behave or instant) as server:
        if scenario.behave is None:
            with nginx_limit_req(folder / "nginx", server.root_url, rate=scenario.nginx_rate,
                                 retry_after=scenario.nginx_retry_after) as nginx:
                outcome = await probe(nginx.base_url, scenario.n, out, concurrency=scenario.concurrency,
                                      **scenario.config)
                server.requests += nginx.refused()
        else:
            outcome = await probe(f"{server.root_url}/v1", scenario.n, out, concurrency=scenario.concurrency,
                                  **scenario.config)
    return outcome, server


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_every_server_behaviour_ends_with_nothing_lost(scenario: Scenario, tmp_path: Path) -> None:
    outcome, server = await run_scenario(scenario, tmp_path)
    assert outcome.wall_s <= scenario.factor * scenario.capacity_s + scenario.slack_s, outcome
    if scenario.expect_exit == CHANCE_ERRORS:  # slow but live: never called hung; an item fails only when every
        # attempt drew over the timeout (1 in 64)
        assert outcome.exit in (0, 1) and outcome.ok + outcome.errors == scenario.n and outcome.errors <= 2, outcome
        return
    assert outcome.exit == scenario.expect_exit, outcome
    if scenario.expect_exit == 0:
        assert (outcome.ok, outcome.errors) == (scenario.n, 0)  # no error record a wait would have avoided
    elif scenario.expect_exit == 1:  # only the wedged items fail, each after its whole schedule
        assert (outcome.ok, outcome.errors) == (scenario.n * 9 // 10, scenario.n // 10), outcome
        assert server.per_item.get(0) == 3
    else:
        assert outcome.ok == 0 and outcome.errors == 0, outcome  # stopped in one line: no error record written
        assert "rerun the same command" in outcome.line
    if scenario.name.startswith("429 + Retry-After 3600"):
        assert "asks to wait 3600s before the next request" in outcome.line
        assert server.requests <= scenario.n  # stopped at the first 429: one request a sample at most
    if scenario.name.startswith("503 loading"):
        assert "is still loading after" in outcome.line
        # backoff 0.05 s doubling: about log2(3 / 0.05) + 1 = 7 polls a sample in 3 s, not 60 (Retry-After: 0)
        assert server.requests <= scenario.n * 10, server.requests


def table() -> None:
    """Run every scenario once and print the rows of the table in docs/http.md."""
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory() as folder:
            outcome, server = asyncio.run(run_scenario(scenario, Path(folder)))
        allowed = scenario.factor * scenario.capacity_s + scenario.slack_s
        print(f"| {scenario.name} | {scenario.n} | {scenario.concurrency} | {scenario.capacity_s:.1f} s | "
              f"{outcome.wall_s:.1f} s | {allowed:.0f} s | {outcome.ok} / {outcome.errors} | {outcome.exit} | "
              f"{server.requests} |", flush=True)


if __name__ == "__main__":
    sys.exit(table())
