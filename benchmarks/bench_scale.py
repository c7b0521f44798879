"""Scale of `userturn probe`: resume of a million-record results file, and memory against the number of items.

    .venv/bin/python benchmarks/bench_scale.py                      # both parts, default sizes
    .venv/bin/python benchmarks/bench_scale.py --part resume --records 1000000 --samples 100
    .venv/bin/python benchmarks/bench_scale.py --part memory --items 100000 --items 10000
    .venv/bin/python benchmarks/bench_scale.py --part resume --baseline-cmd \
        "env PYTHONPATH=/tmp/old $PWD/.venv/bin/python -m userturn"      # before and after, taking turns

Part 1, resume: a results file of N ok records (GSM8K-sized conversations, ~1.8 kB a line; the configuration is
one line at the top, as the probe writes it; N / samples items x `--samples` samples at one temperature) is probed
again with one more item in the dataset, so every recorded key is skipped and the new item's samples are sent;
then once more with another item (`--rounds`). The file is the only state: each resume scans it whole, once (the
head of each line: `userturn.core.resume_index`). Measured on the `userturn probe` process: seconds from its start
to the first request the loopback server receives, and its peak RSS (VmHWM, polled every 10 ms) at that moment.
Targets: <= 5 s and <= 300 MB for 1,000,000 records. The probe's CPU time up to that moment is printed beside
the wall time: on a loaded machine it is what the wall time would be on an idle one. With `--baseline-cmd`,
another userturn build (an older commit laid out as the wheel installs it: see benchmarks/bench_probe.py) resumes
the same file right before each resume of this checkout's: before and after measured in the same minutes.

Part 2, memory: a fresh probe of each `--items` count x 1 sample against the loopback server (latency 0,
concurrency 64); peak RSS of the whole run (the probe's process tree).
Targets: <= 100 MB at 10,000 items and <= 150 MB at 100,000 (flat in the item count).

Both parts print one line per measurement and a PASS/MISS verdict per target. The loopback server runs in its own
process (tests/support/loopback_server.py); the machine's load is printed, since a shared 2-core VM moves wall times.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_probe import TreePeak, peak_rss_kb, tokenizer_dir, write_dataset  # noqa: E402
from loopback_server import LoopbackServer  # noqa: E402

RESUME_TARGET_S, RESUME_TARGET_MB = 5.0, 300.0
MEMORY_TARGETS_MB = {10_000: 100.0, 100_000: 150.0}  # items -> peak RSS target


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def seed_record(server: LoopbackServer, dataset: Path, work: Path) -> tuple[bytes, dict[str, Any]]:
    """The configuration line and one real ok record of `dataset`'s first item, probed with this benchmark's
    settings: the fingerprint is the one the resumed probe computes, so resume accepts the generated file."""
    first = work / "seed" / dataset.name  # same stem: the same dataset name in keys and configuration
    first.parent.mkdir(exist_ok=True)
    first.write_bytes(dataset.read_bytes().split(b"\n", 1)[0] + b"\n")
    out = work / "seed" / "results.jsonl"
    subprocess.run(probe_cmd(server, first, out, 1), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    config, line = out.read_bytes().splitlines()[:2]
    record: dict[str, Any] = orjson.loads(line)
    if record.get("status") != "ok" or not record.get("config_fingerprint") or b'"type":"config"' not in config:
        sys.exit(f"bench_scale: the seed probe wrote no usable record: {record}")
    return config + b"\n", record


def write_results(dataset: Path, out: Path, samples: int, seed: tuple[bytes, dict[str, Any]]) -> int:
    """The seed's configuration line, then ok records for every item of `dataset` x `samples`: the seed record with
    each item's id, messages, key, sample and seed (keyed exactly as the probe keys them)."""
    from userturn.client.data.dataset import load_jsonl
    from userturn.core.records import record_key

    count = 0
    config, record = seed
    base = dict(record)
    with out.open("wb") as fh:
        fh.write(config)
        for item in load_jsonl(dataset):
            base.update(item_id=item.id, messages=[m.model_dump(mode="json") for m in item.messages])
            lines = []
            for k in range(samples):
                base.update(key=record_key(record["model"], record["dataset"], item.id, "none", 1.0, k), sample=k,
                            seed=count)
                lines.append(orjson.dumps(base, option=orjson.OPT_APPEND_NEWLINE))
                count += 1
            fh.write(b"".join(lines))
    return count


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (Linux /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def completions(server: LoopbackServer) -> int:
    with urllib.request.urlopen(f"{server.root_url}/stats", timeout=5) as response:
        return int(orjson.loads(response.read()).get("completions", 0))


def probe_cmd(server: LoopbackServer, dataset: Path, out: Path, samples: int,
              userturn: list[str] | None = None) -> list[str]:
    return [*(userturn or [str(Path(sys.executable).with_name("userturn"))]), "probe", "--base-url", server.base_url,
            "--model", "bench", "--dataset", str(dataset), "--out", str(out), "--tokenizer", str(tokenizer_dir()),
            "--samples", str(samples), "--temperature", "1.0", "--concurrency", "64", "--no-progress"]


def first_request(server: LoopbackServer, cmd: list[str]) -> tuple[float, float, float, int]:
    """Run a probe that resumes; (seconds from its start to the first request the server receives, its CPU seconds
    by then, its peak RSS in MB by then, requests it sent in all)."""
    base_completions = completions(server)
    # Started outside the checkout: a `python -m userturn` baseline must not import this checkout's package.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tempfile.gettempdir())
    start = time.perf_counter()
    peak = 0
    first_request_s = cpu_s = None
    while proc.poll() is None:
        peak = max(peak, peak_rss_kb(proc.pid) or 0)
        if completions(server) > base_completions:
            first_request_s = time.perf_counter() - start
            cpu_s = cpu_seconds(proc.pid)
            break
        time.sleep(0.01)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0 or first_request_s is None or cpu_s is None:
        sys.exit(f"bench_scale: the resumed probe failed (exit {proc.returncode}): {err.decode()[-2000:]}")
    return first_request_s, cpu_s, peak / 1024, completions(server) - base_completions


def run_resume(work: Path, records: int, samples: int, rounds: int, baseline: list[str] | None) -> bool:
    """`rounds` resumes of the same file, each a full scan of it (with a baseline: one of each build a round)."""
    builds: list[tuple[str, list[str] | None]] = [("this checkout", None)]
    if baseline:
        builds.insert(0, ("baseline", baseline))
    items = records // samples
    dataset = work / "resume.jsonl"
    write_dataset(dataset, items + 1 + rounds * len(builds))
    all_items = dataset.read_bytes().splitlines(keepends=True)
    out = work / "resume-results.jsonl"
    done_items = work / "done-items.jsonl"
    done_items.write_bytes(b"".join(all_items[:items]))
    ok = True
    with LoopbackServer("--model", "bench") as server:
        started = time.perf_counter()
        dataset.write_bytes(b"".join(all_items[:items + 1]))
        written = write_results(done_items, out, samples, seed_record(server, dataset, work))
        print(f"resume: wrote {written:,} records ({out.stat().st_size / 1e9:.2f} GB, {items:,} items x {samples} "
              f"samples) in {time.perf_counter() - started:.0f}s")
        pending = items + 1
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in builds}
        for number in range(1, rounds + 1):
            for name, userturn in builds:
                os.sync()  # what was just written is flushed first: the kernel's writeback is not the probe's resume
                cmd = probe_cmd(server, dataset, out, samples, userturn)
                wall, cpu, peak_mb, sent = first_request(server, cmd)
                ok_time, ok_rss = wall <= RESUME_TARGET_S, peak_mb <= RESUME_TARGET_MB
                print(f"resume of {written:,} records, {name}, resume {number}: first request after {wall:.2f}s "
                      f"(CPU time of the probe by then {cpu:.2f}s), peak RSS before it {peak_mb:.0f} MB; requests "
                      f"sent {sent} (expected {samples}); targets: <= {RESUME_TARGET_S:g} s {verdict(ok_time)}, "
                      f"<= {RESUME_TARGET_MB:g} MB {verdict(ok_rss)}")
                figures[name].append((wall, cpu))
                if userturn is None:
                    ok = ok and ok_time and ok_rss and sent == samples
                pending += 1
                dataset.write_bytes(b"".join(all_items[:pending]))  # one more pending item for the next resume
        if baseline:
            for name, runs in figures.items():
                walls, cpus = sorted(w for w, _ in runs), sorted(c for _, c in runs)
                print(f"resume, {name}: first request after {walls[0]:.2f}-{walls[-1]:.2f}s wall, "
                      f"{cpus[0]:.2f}-{cpus[-1]:.2f}s CPU ({len(runs)} resumes)")
    return ok


def measure_peak(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB of its process tree: see bench_probe.TreePeak, stderr) of a command that must
    succeed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()
    tree = TreePeak(proc.pid)

    def poll() -> None:
        nonlocal peak
        while not done.is_set():
            peak = tree.poll()
            done.wait(0.01)

    thread = threading.Thread(target=poll)
    start = time.perf_counter()
    thread.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    thread.join()
    if proc.returncode != 0:
        sys.exit(f"bench_scale: {' '.join(cmd[:2])} failed (exit {proc.returncode}): {err.decode()[-2000:]}")
    return wall, peak / 1024, err.decode()


def run_memory(work: Path, counts: list[int]) -> bool:
    peaks: dict[int, float] = {}
    with LoopbackServer("--model", "bench") as server:
        for items in sorted(counts):
            dataset = work / f"memory-{items}.jsonl"
            write_dataset(dataset, items)
            out = work / f"memory-{items}-results.jsonl"
            wall, peak, err = measure_peak(probe_cmd(server, dataset, out, 1))
            data = out.read_bytes()
            lines = data.count(b"\n") - data.count(b'{"type":"config"')  # record lines
            if lines != items:
                sys.exit(f"bench_scale: {items} items gave {lines} records: {err[-1000:]}")
            peaks[items] = peak
            print(f"memory: probe of {items:,} items x 1 sample: peak RSS {peak:.0f} MB, {wall:.1f}s "
                  f"({items / wall:,.0f} req/s)")
            out.unlink()
            dataset.unlink()
    ok = True
    for items, peak in sorted(peaks.items()):
        target = MEMORY_TARGETS_MB.get(items)
        if target is not None:
            ok = ok and peak <= target
            print(f"memory: peak at {items:,} items {peak:.0f} MB: <= {target:g} MB {verdict(peak <= target)}")
    largest, smallest = max(peaks), min(peaks)
    print(f"memory: growth from {smallest:,} to {largest:,} items {peaks[largest] - peaks[smallest]:+.0f} MB")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False,
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["resume", "memory"], action="append", help="default: both")
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the file to resume")
    parser.add_argument("--samples", type=int, default=100, help="samples per item in that file")
    parser.add_argument("--rounds", type=int, default=2, help="resumes of the file (of each build)")
    parser.add_argument("--baseline-cmd", metavar="CMD", help="another userturn build, e.g. \"env PYTHONPATH=/tmp/old "
                        "/path/.venv/bin/python -m userturn\": its resumes take turns with this checkout's")
    parser.add_argument("--items", type=int, action="append", help="item counts of the memory part "
                        "(repeatable; default 10000 and 100000)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the files go (default: a temp dir)")
    args = parser.parse_args()
    parts = args.part or ["resume", "memory"]
    print(f"machine: {os.cpu_count()} cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="userturn-scale-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        results = []
        if "resume" in parts:
            baseline = shlex.split(args.baseline_cmd) if args.baseline_cmd else None
            results.append(run_resume(work, args.records, args.samples, args.rounds, baseline))
        if "memory" in parts:
            results.append(run_memory(work, args.items or [10_000, 100_000]))
    print("bench_scale: " + ("all targets met" if all(results) else "some targets missed"))


if __name__ == "__main__":
    main()
