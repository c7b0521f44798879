"""A probe whose samples are prepared in a forked process writes what an inline one writes, resumes the same way,
and stops with one line when the child fails (client.job_feed). Against a real loopback server process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loopback_server import LoopbackServer
from test_pipeline import ChatMLRenderer
from userturn.client import job_feed
from userturn.client.endpoint import Endpoint, EndpointConfig
from userturn.client.lazy_dataset import load_jsonl_lazy
from userturn.client.perturb import perturb
from userturn.client.pipeline import ProbeRun, ProbeSettings

from userturn.errors import UserError

pytestmark = pytest.mark.skipif(not job_feed.sys.platform.startswith("linux"), reason="forks only on Linux")

PLAN = ProbeSettings(model="m", dataset="d", temperatures=[0.0, 1.0], samples=2, concurrency=8,
                     perturbations=["none", "wrong_answer", "generic"])


def write_items(path: Path, n: int) -> None:
    with path.open("w") as fh:
        for i in range(n):  # every 5th answer has no number: wrong_answer does not apply to it
            answer = "No idea, sorry." if i % 5 == 0 else f"It is {2 * i}."
            fh.write(json.dumps({"id": f"q{i}", "answer": str(2 * i), "messages": [
                {"role": "user", "content": f"What is {i}+{i}?"}, {"role": "assistant", "content": answer}]}) + "\n")


async def probe(server: LoopbackServer, data: Path, out: Path, prepare: str) -> tuple[ProbeRun, Any]:
    ep = Endpoint(EndpointConfig(base_url=server.base_url, concurrency=8))
    try:
        run = ProbeRun(load_jsonl_lazy(data), PLAN, endpoints=[ep], renderer=ChatMLRenderer(), out_path=str(out),
                       progress=False, perturb=perturb, prepare=prepare)  # type: ignore[arg-type]
        summary = await run.run()
    finally:
        await ep.aclose()
    return run, summary


def records(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record.pop("latency_s")
        out[record["key"]] = record
    return out


@pytest.fixture
def single_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork even where earlier tests left an idle thread behind (the probe's own check is `can_fork`)."""
    monkeypatch.setattr(job_feed.threading, "active_count", lambda: 1)


async def test_forked_and_inline_preparation_write_the_same_records(tmp_path: Path, single_threaded: None) -> None:
    data = tmp_path / "data.jsonl"
    write_items(data, 250)
    with LoopbackServer() as server:
        inline_run, inline = await probe(server, data, tmp_path / "inline.jsonl", "inline")
        forked_run, forked = await probe(server, data, tmp_path / "forked.jsonl", "process")
    assert (inline_run.prepared_in, forked_run.prepared_in) == ("inline", "process")
    assert (forked.ok, forked.errors, forked.not_applicable, forked.total) == \
        (inline.ok, inline.errors, inline.not_applicable, inline.total) == (2800, 0, 200, 3000)
    assert records(tmp_path / "forked.jsonl") == records(tmp_path / "inline.jsonl")


async def test_a_forked_resume_skips_what_is_done(tmp_path: Path, single_threaded: None) -> None:
    data = tmp_path / "data.jsonl"
    write_items(data, 250)
    out = tmp_path / "out.jsonl"
    with LoopbackServer() as server:
        await probe(server, data, out, "process")
        lines = out.read_text().splitlines()
        out.write_text("".join(line + "\n" for line in lines
                               if '"item_id":"q7"' not in line and '"item_id":"q8"' not in line))
        run, summary = await probe(server, data, out, "process")
        stats = server.stats()
    assert run.prepared_in == "process"
    assert (summary.ok, summary.skipped, summary.not_applicable) == (24, 2776, 200)  # q7, q8: 2 x 3 x 4 samples
    assert stats["requests"] == 2800 + 24
    assert len(records(out)) == 2800


async def test_a_dataset_changed_under_a_forked_run_stops_it_with_one_line(tmp_path: Path,
                                                                           single_threaded: None) -> None:
    data = tmp_path / "data.jsonl"
    write_items(data, 250)
    items = load_jsonl_lazy(data)
    text = data.read_text().replace('"id": "q200"', '"id": "q2x0"')
    data.write_text(text)  # same length, another id: the re-read sees it
    with LoopbackServer() as server:
        ep = Endpoint(EndpointConfig(base_url=server.base_url))
        run = ProbeRun(items, PLAN, endpoints=[ep], renderer=ChatMLRenderer(), out_path=str(tmp_path / "out.jsonl"),
                       progress=False, perturb=perturb, prepare="process")
        try:
            with pytest.raises(UserError) as info:
                await run.run()
        finally:
            await ep.aclose()
    assert str(info.value) == f"{data}: the file changed while the run was reading it (item 'q200')"
    assert run.prepared_in == "process"
    done = records(tmp_path / "out.jsonl")  # the other preparing process's items may run on until the stop
    assert done and "q200" not in {r["item_id"] for r in done.values()}
    assert all(r["status"] == "ok" for r in done.values())
