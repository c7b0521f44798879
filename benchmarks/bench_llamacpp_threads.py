"""The llama.cpp quick start's wall time with userturn's `--threads` choice beside llama-server with one thread
and with llama.cpp's own default (no `--threads`: a thread per core), side by side, interleaved.

Each variant is `userturn probe --manifest M` on a copy of manifests/quickstart-llamacpp.yaml (`binary:` the given
llama-server; `-t 1` through extra_args; the default through a wrapper that drops userturn's `--threads`), on the
first N MT-Bench reference items at T=0 and T=1, into a fresh results file. Rounds alternate the variants so a
busier minute falls on all of them; the ratio to `-t 1` is what to read.

    python benchmarks/bench_llamacpp_threads.py --binary /path/to/llama-server [--limit 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "manifests" / "quickstart-llamacpp.yaml"
WRAPPER = """#!{python}
import os, sys
argv = sys.argv[1:]
if "--threads" in argv:
    i = argv.index("--threads")
    del argv[i:i + 2]
os.execv({binary!r}, [{binary!r}, *argv])
"""


def manifests(binary: str, where: Path) -> dict[str, Path]:
    """name -> manifest file of each variant."""
    base = yaml.safe_load(QUICKSTART.read_text())
    wrapper = where / "llama-server-own-threads"
    wrapper.write_text(WRAPPER.format(python=sys.executable, binary=binary))
    wrapper.chmod(0o755)
    variants = {"userturn's --threads": {"binary": binary}, "-t 1": {"binary": binary, "extra_args": ["-t", "1"]},
                "llama.cpp's default": {"binary": str(wrapper)}}
    out = {}
    for name, changes in variants.items():
        path = where / f"{len(out)}.yaml"
        path.write_text(yaml.safe_dump({**base, **changes, "name": f"bench-{len(out)}"}))
        out[name] = path
    return out


def run(manifest: Path, limit: int, out: Path) -> float:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "userturn", "probe", "--manifest", str(manifest), "--dataset",
                           "mt-bench:reference", "--limit", str(limit), "--temperature", "0", "--temperature", "1",
                           "--out", str(out), "--no-progress"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{manifest}: exit {done.returncode}: {done.stderr[-1500:]}")
    return time.monotonic() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--binary", required=True, help="the llama-server to launch")
    p.add_argument("--limit", type=int, default=4, help="MT-Bench items (x2 temperatures)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        variants = manifests(args.binary, where)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.rounds):
            for i, (name, manifest) in enumerate(variants.items()):
                times[name].append(run(manifest, args.limit, where / f"r{r}-{i}.jsonl"))
                print(f"round {r + 1} {name}: {times[name][-1]:.1f} s", flush=True)
        one = statistics.median(times["-t 1"])
        for name, values in times.items():
            print(f"{name}: median {statistics.median(values):.1f} s over {len(values)} runs "
                  f"({statistics.median(values) / one:.2f}x the wall time of -t 1)")


if __name__ == "__main__":
    main()
