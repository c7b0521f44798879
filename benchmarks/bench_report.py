"""Peak memory and time of `userturn report` on a generated results file (default 1,000,000 records).

    .venv/bin/python benchmarks/bench_report.py                      # 1M records, --json, then --html
    .venv/bin/python benchmarks/bench_report.py --records 100000 --no-html
    .venv/bin/python benchmarks/bench_report.py --file runs/big.jsonl   # reuse a file written before

The file is written by this process (records shaped like a judged probe run: GSM8K-sized conversation, two judge
verdicts, a readable config and its fingerprint; items x perturbations x temperatures x samples), plus
`--rejudged` extra lines that re-append existing keys with another label (the last line per key counts). Each
report then runs as a child process; its peak RSS is the child's `ru_maxrss` (RUSAGE_CHILDREN: this process's own
memory is not in it) and its time the wall time from start to exit. Target (issue 10): <= 150 MB at 1M records.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
TARGET_MB = 150.0
PERTURBATIONS = ("none", "wrong_answer", "generic", "swap", "remove")
LABELS = ("genuine_followup", "restates_query", "assistant_continuation", "meta_commentary", "generic",
          "unrelated_query", "empty")
QUERY = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
         "How many clips did Natalia sell altogether in April and May? Explain each step.") * 2
ANSWER = "In May she sold 48 / 2 = 24 clips. Altogether she sold 48 + 24 = 72 clips. The answer is 72." * 3


def config_for(perturbation: str) -> tuple[dict, str]:
    config = {"model": "Qwen/Qwen3-8B", "mode": "raw", "template_sha256": "ab" * 32, "max_tokens": 256,
              "top_p": 1.0, "stop": ["<|im_end|>"], "seed": 1234, "assistant_source": "dataset",
              "perturbation": perturbation}
    return config, hashlib.sha256(orjson.dumps(config, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def record(item: int, perturbation: str, temperature: float, sample: int, label: str, config: tuple[dict, str]
           ) -> dict:
    item_id = f"gsm8k-test-{item:06d}"
    key = f"Qwen/Qwen3-8B|gsm8k|{item_id}|raw|{perturbation}|t={temperature:g}|s={sample}"
    verdicts = [{"judge": judge, "source": "judge", "status": "ok", "label": label,
                 "rationale": "The turn asks about the division step.", "prompt_sha256": "6f" * 32, "attempts": 1,
                 "latency_s": 0.8} for judge in ("judge-a", "judge-b")]
    return {"schema_version": 1, "key": key, "model": "Qwen/Qwen3-8B", "dataset": "gsm8k", "item_id": item_id,
            "mode": "raw", "perturbation": perturbation, "temperature": temperature, "sample": sample,
            "seed": 1234 + sample, "messages": [{"role": "user", "content": QUERY},
                                                {"role": "assistant", "content": ANSWER}],
            "assistant_source": "dataset", "prompt_sha256": "cd" * 32, "template_sha256": "ab" * 32,
            "user_turn": "Why did you divide 48 by 2 in the second step?", "finish_reason": "stop",
            "matched_stop": "<|im_end|>", "status": "ok", "error": None,
            "usage": {"prompt_tokens": 120, "completion_tokens": 14, "total_tokens": 134}, "latency_s": 0.42,
            "attempts": 1, "reference_answer": "72", "correct": perturbation in ("none", "generic"),
            "label": label, "label_source": "majority", "judge_status": "ok", "judges": verdicts,
            "config_fingerprint": config[1], "config": config[0]}


def write_file(path: Path, records: int, samples: int, temperatures: int, rejudged: int, seed: int) -> int:
    """Write `records` distinct records plus `rejudged` re-appended keys; returns the number of lines."""
    rng = random.Random(seed)
    per_item = len(PERTURBATIONS) * temperatures * samples
    items = -(-records // per_item)
    configs = {p: config_for(p) for p in PERTURBATIONS}
    temps = [round(0.5 * t, 2) for t in range(temperatures)]
    written = lines = 0
    with path.open("wb", buffering=1 << 20) as fh:
        for item in range(items):
            propensity = rng.random()  # item-level follow-up propensity: samples of one item are correlated
            for p in PERTURBATIONS:
                for t in temps:
                    for s in range(samples):
                        if written == records:
                            break
                        label = "genuine_followup" if rng.random() < propensity else rng.choice(LABELS[1:])
                        rec = record(item, p, t, s, label, configs[p])
                        fh.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                        written += 1
                        if rejudged and rng.random() < rejudged / records:
                            rec["label"] = rng.choice(LABELS)
                            fh.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                            lines += 1
    return written + lines


def measure(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of `python -m userturn report ARGS` run as a child."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "userturn", "report", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode:
        print(done.stderr.strip(), file=sys.stderr)
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--temperatures", type=int, default=2)
    parser.add_argument("--rejudged", type=int, default=50_000, help="extra lines re-appending existing keys")
    parser.add_argument("--file", type=Path, default=None, help="use (or create) this file instead of a temp one")
    parser.add_argument("--no-html", action="store_true", help="measure --json only")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench_report_")
    path = args.file or Path(tmp.name) / "results.jsonl"
    if not path.exists():
        started = time.monotonic()
        lines = write_file(path, args.records, args.samples, args.temperatures, args.rejudged, args.seed)
        print(f"wrote {lines:,} lines ({args.records:,} records) to {path}: "
              f"{path.stat().st_size / 2**20:,.0f} MiB in {time.monotonic() - started:.1f}s", flush=True)
    failed = False
    runs = [("--json", ["--json"])]
    if not args.no_html:
        runs.append(("--html", ["--html", str(Path(tmp.name) / "report.html")]))
    for name, extra in runs:
        # ru_maxrss of children is the maximum over all children so far: --json runs first, so the --html figure
        # is the larger of the two.
        wall, peak, code = measure([str(path), *extra])
        ok = code == 0 and peak <= TARGET_MB
        failed |= not ok
        print(f"report {name}: {wall:.1f}s, peak RSS {peak:.0f} MB (target <= {TARGET_MB:.0f} MB at 1M records): "
              f"{'PASS' if ok else 'FAIL'}{'' if code == 0 else f' (exit {code})'}", flush=True)
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
