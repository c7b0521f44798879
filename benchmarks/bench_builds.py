"""Two userturn builds on the same loopback server, alternating, in one run: is a change faster or slower?

    python benchmarks/bench_builds.py --build main=/work/main --build branch=. [--requests 4000] [--items 400]
                                      [--rounds 5] [--command probe|run]

Each `--build NAME=CHECKOUT` runs `CHECKOUT/.venv/bin/userturn` with `PYTHONPATH=CHECKOUT`. Per scenario of
`bench_probe.py` (probe) or scenario 1 (run: an experiment with one endpoint model), every round runs each build once,
in alternating order, against one server process, and the script prints per build the in-run rate (probe), CPU time
per request and wall time, and the paired in-run ratio of the second build to the first. The machine's drift between
minutes cancels out of the paired ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import bench_probe as bp
from loopback_server import LoopbackServer


def build(text: str) -> tuple[str, Path]:
    name, sep, checkout = text.partition("=")
    path = Path(checkout).resolve()
    if not sep or not (path / ".venv" / "bin" / "userturn").is_file():
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKOUT with CHECKOUT/.venv/bin/userturn, got {text!r}")
    return name, path


def probe_once(checkout: Path, server: LoopbackServer, dataset: Path, work: Path, samples: int, requests: int,
               concurrency: int, tokenizer: Path) -> tuple[float | None, float, float]:
    out = work / f"probe-{time.monotonic_ns()}.jsonl"
    cmd = [str(checkout / ".venv" / "bin" / "userturn"), "probe", "--base-url", server.base_url, "--model", "bench",
           "--dataset", str(dataset), "--out", str(out), "--tokenizer", str(tokenizer), "--samples", str(samples),
           "--temperature", "1.0", "--concurrency", str(concurrency), "--no-progress"]
    wall, _, cpu, stdout, stderr = bp.run_measured(cmd, {**os.environ, "PYTHONPATH": str(checkout)})
    ok = sum('"status":"ok"' in line for line in out.read_text().splitlines())
    if ok != requests:
        sys.exit(f"bench_builds: {checkout} wrote {ok} ok records of {requests}:\n{stderr[-2000:]}")
    out.unlink()
    match = bp.SUMMARY_RATE.search(stdout + stderr)
    return (float(match.group(1)) if match else None), cpu / requests * 1e6, wall


def run_once(checkout: Path, server: LoopbackServer, dataset: Path, work: Path, samples: int, requests: int,
             concurrency: int, tokenizer: Path) -> tuple[float | None, float, float]:
    name = f"r{time.monotonic_ns()}"
    experiment = work / f"{name}.yaml"
    experiment.write_text(f"name: {name}\nmodels: [{{base_url: '{server.base_url}', model: bench, tokenizer: "
                          f"'{tokenizer}'}}]\ndatasets: [{{spec: '{dataset}'}}]\ntemperatures: [1.0]\n"
                          f"samples: {samples}\nconcurrency: {concurrency}\nmax_tokens: 256\n")
    cmd = [str(checkout / ".venv" / "bin" / "userturn"), "run", str(experiment), "--out-dir", str(work / "runs"),
           "--no-progress"]
    wall, _, cpu, _, stderr = bp.run_measured(cmd, {**os.environ, "PYTHONPATH": str(checkout)})
    results = work / "runs" / name / "results.jsonl"
    ok = sum('"status":"ok"' in line for line in results.read_text().splitlines()) if results.exists() else 0
    if ok != requests:
        sys.exit(f"bench_builds: {checkout} wrote {ok} ok records of {requests}:\n{stderr[-2000:]}")
    return None, cpu / requests * 1e6, wall


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=build, action="append", required=True, metavar="NAME=CHECKOUT")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--command", choices=["probe", "run"], default="probe")
    args = parser.parse_args()
    if len(args.build) != 2 or args.requests % args.items:
        sys.exit("bench_builds: give two --build, and --requests a multiple of --items")
    samples = args.requests // args.items
    tokenizer = bp.tokenizer_dir()
    once = probe_once if args.command == "probe" else run_once
    print("machine: " + ", ".join(f"{k} {v}" for k, v in bp.machine_facts().items()))
    with tempfile.TemporaryDirectory(prefix="userturn-builds-") as tmp:
        work = Path(tmp)
        dataset = work / "bench.jsonl"
        bp.write_dataset(dataset, args.items)
        for number in sorted(bp.SCENARIOS) if args.command == "probe" else [1]:
            scenario = bp.SCENARIOS[number]
            results: dict[str, list[tuple[float | None, float, float]]] = {name: [] for name, _ in args.build}
            with LoopbackServer("--latency-ms", str(scenario.latency_ms), "--model", "bench") as server:
                for i in range(args.rounds):
                    for name, checkout in (args.build if i % 2 == 0 else args.build[::-1]):
                        results[name].append(once(checkout, server, dataset, work, samples, args.requests,
                                                  scenario.concurrency, tokenizer))
            print(f"{args.command}, scenario {number} (latency {scenario.latency_ms:g} ms, concurrency "
                  f"{scenario.concurrency}): {args.requests} requests x {args.rounds} rounds")
            for name, rows in results.items():
                rates = [r[0] for r in rows if r[0] is not None]
                rate = f"in-run req/s best {max(rates):6.0f} median {statistics.median(rates):6.0f} | " if rates else ""
                print(f"  {name:8s} {rate}CPU us/req median {statistics.median(r[1] for r in rows):5.0f} | wall "
                      f"median {statistics.median(r[2] for r in rows):.2f}s")
            (first, a), (second, b) = ((n, results[n]) for n, _ in args.build)
            key = 0 if args.command == "probe" else 2
            ratios = [(y[key] / x[key]) if key == 0 else (x[key] / y[key]) for x, y in zip(a, b, strict=True)]
            print(f"  {second}/{first} paired {'in-run rate' if key == 0 else 'speed (wall)'} ratio median "
                  f"{statistics.median(ratios):.2f} ({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
