"""Peak memory and time of `userturn judge` on a large results file: judging everything, then resuming.

    .venv/bin/python benchmarks/bench_judge.py                  # 100,000 records
    .venv/bin/python benchmarks/bench_judge.py --records 20000 --keep /tmp/judge-bench

Writes a results file of N ok records with GSM8K-sized turns (a query of ~300 characters, an answer of ~700, a
generated user turn of ~60), then runs two scenarios, each in a fresh Python process that calls
`userturn.judges.run_judge.judge_file` with an in-process judge answering instantly (no HTTP, so what is measured
is userturn's own reading, planning, judging bookkeeping and writing):

* judge:  the output file is empty, every record is judged and written;
* resume: the same command again on the finished output: every key is already done, nothing is judged.

Printed per scenario: wall time of the call, peak RSS of the process (VmHWM from /proc/self/status) and the RSS
after imports and setup (so the difference is what judging the file costs), plus the counts the run reported.
Target (issue 10): memory must not grow with the whole file held as objects; for 100,000 records the resume
peak stays below 150 MB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
QUERY = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
         "clips did Natalia sell altogether in April and May? Show your work step by step, and explain each step "
         "so that a student can follow it easily. ")
ANSWER = ("In April Natalia sold 48 clips. In May she sold half as many, which is 48 / 2 = 24 clips. " * 8).strip()
TURNS = ("Why did you divide by 2 in May?", "thanks!", "Can you check step 2 again please?",
         "What if she sold a third as many?")


def write_results(path: Path, n: int) -> None:
    """N ok records, one JSON line each."""
    with path.open("wb") as fh:
        for i in range(n):
            fh.write(orjson.dumps({
                "key": f"bench|gsm8k|item-{i}|raw|none|t=0.7|s=0", "model": "bench", "dataset": "gsm8k",
                "item_id": f"item-{i}", "mode": "raw", "perturbation": "none", "temperature": 0.7, "sample": 0,
                "seed": i, "status": "ok", "user_turn": f"{TURNS[i % len(TURNS)]} ({i})",
                "messages": [{"role": "user", "content": f"{QUERY}#{i}"}, {"role": "assistant", "content": ANSWER}],
                "prompt_sha256": "0" * 64, "finish_reason": "stop", "latency_s": 0.01, "attempts": 1,
            }, option=orjson.OPT_APPEND_NEWLINE))


CHILD = r"""
import asyncio, json, sys, time
from pathlib import Path
from userturn.core.records import JudgeVerdict
from userturn.judges.llm_judge import JudgeConfig
from userturn.judges.panel import JudgePanel, PanelConfig
from userturn.judges.prompt import load_prompt
from userturn.judges.run_judge import judge_file


def rss_kb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class InstantJudge:
    name = "bench-judge"

    def __init__(self, prompt):
        self.prompt = prompt

    async def check(self):
        pass

    async def aclose(self):
        pass

    async def judge(self, query, response, user_turn):
        label = "genuine_followup" if "?" in user_turn else "generic"
        return JudgeVerdict(judge=self.name, status="ok", label=label, rationale="instant",
                            prompt_sha256=self.prompt.sha256, attempts=1, latency_s=0.0)


prompt = load_prompt()
panel = JudgePanel(PanelConfig(judges=[JudgeConfig(model="bench-judge", base_url="http://127.0.0.1:9/v1")]),
                   prompt=prompt, judges=[InstantJudge(prompt)])
setup_kb = rss_kb("VmRSS")
start = time.perf_counter()
summary = asyncio.run(judge_file(Path(sys.argv[1]), Path(sys.argv[2]), panel, workers=16, progress=False))
wall = time.perf_counter() - start
c = summary.counters
print(json.dumps({"wall_s": round(wall, 2), "peak_rss_mb": round(rss_kb("VmHWM") / 1024, 1),
                  "setup_rss_mb": round(setup_kb / 1024, 1), "total": summary.total,
                  "already_done": summary.already_done, "judged": c.judged, "rule_labels": c.rule_labels,
                  "judge_failures": c.judge_failures}))
"""


def run_scenario(results: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(results), str(out)], capture_output=True, text=True,
                          cwd=REPO, check=False)
    if proc.returncode != 0:
        sys.exit(f"bench_judge: the judge run failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False,
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="records in the results file (default 100,000)")
    parser.add_argument("--keep", default=None, metavar="DIR", help="write the files here and keep them")
    parser.add_argument("--max-resume-mb", type=float, default=150.0, help="target for the resume peak RSS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        results, out = folder / "results.jsonl", folder / "results.judged.jsonl"
        out.unlink(missing_ok=True)
        started = time.perf_counter()
        write_results(results, args.records)
        print(f"bench_judge: {args.records} records, {results.stat().st_size / 1e6:.0f} MB "
              f"(written in {time.perf_counter() - started:.1f}s)")
        rows = [("judge", run_scenario(results, out))]
        print(f"bench_judge: judged file {out.stat().st_size / 1e6:.0f} MB")
        rows.append(("resume", run_scenario(results, out)))
    print(f"{'scenario':<8} {'wall s':>8} {'peak RSS MB':>12} {'setup RSS MB':>13}  counts")
    for name, row in rows:
        counts = (f"judged {row['judged']}, rule labels {row['rule_labels']}, failures {row['judge_failures']}, "
                  f"already done {row['already_done']} of {row['total']}")
        print(f"{name:<8} {row['wall_s']:>8.2f} {row['peak_rss_mb']:>12.1f} {row['setup_rss_mb']:>13.1f}  {counts}")
    resume = rows[1][1]
    verdict = "ok" if resume["peak_rss_mb"] <= args.max_resume_mb else "MISSED"
    print(f"resume peak RSS {resume['peak_rss_mb']:.1f} MB, target <= {args.max_resume_mb:g} MB: {verdict}")


if __name__ == "__main__":
    main()
