"""`userturn export --format inspect` of N judged records: wall time and peak RSS, two builds side by side.

    python benchmarks/bench_inspect_export.py --build old=/work/main --build new=. --records 5000 10000
    python benchmarks/bench_inspect_export.py --build new=. --records 100000

Writes one judged results file per N (one model and dataset, so every record lands in one configuration: the
largest log a run makes; 2 perturbations x 2 temperatures x 4 samples per item, GSM8K-sized messages, one judge
verdict each, a configuration line), then runs each build's `python -m userturn export FILE --format inspect --out
DIR` under `/usr/bin/time` (wall and CPU seconds, peak RSS of the process) in alternating order, and reads the logs back
with inspect_ai's `read_eval_log_sample_summaries` to check they hold N samples. Each `--build NAME=CHECKOUT` runs
`CHECKOUT/.venv/bin/python` with `PYTHONPATH=CHECKOUT`, from the scratch folder (`python -m` puts the working
directory first on the path: run from a checkout, it would import that checkout's userturn for every build).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ConfigLine, JudgeVerdict, ProbeRecord, Usage, record_key
from userturn.core.taxonomy import LABELS

QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May? ") * 2
ANSWER = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May. Natalia sold 48+24 = <<48+24=72>>72 clips altogether "
          "in April and May. ") * 4
RATIONALE = "The user turn reacts to the division in the answer. " * 3


def write_results(path: Path, n: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with JsonlWriter(path) as writer:
        writer.write_config(ConfigLine(fingerprint="fp-bench", config={"model": "bench-model", "max_tokens": 256}))
        i = 0
        item = 0
        while i < n:
            for perturbation in ("none", "wrong_answer"):
                for temperature in (0.0, 1.0):
                    for sample in range(4):
                        if i >= n:
                            break
                        label = rng.choice(LABELS)
                        writer.write(ProbeRecord(
                            key=record_key("bench-model", "gsm8k", f"item-{item}", perturbation, temperature, sample),
                            status="ok", judge_status="ok", config_fingerprint="fp-bench", model="bench-model",
                            dataset="gsm8k", item_id=f"item-{item}", perturbation=perturbation,
                            temperature=temperature, sample=sample, seed=sample,
                            messages=[{"role": "user", "content": f"{item}: {QUESTION}"},
                                      {"role": "assistant", "content": ANSWER}],
                            user_turn=f"Why did you divide 48 by 2 in step {item}.{sample}? Is May half of April?",
                            finish_reason="stop", usage=Usage(prompt_tokens=180, completion_tokens=20),
                            correct=True, reference_answer="72", label=label, label_source="judge",
                            judge_panel="bench-panel",
                            judges=[JudgeVerdict(judge="judge-a", status="ok", label=label, rationale=RATIONALE)]))
                        i += 1
            item += 1


def build(text: str) -> tuple[str, Path]:
    name, sep, checkout = text.partition("=")
    path = Path(checkout).resolve()
    if not sep or not (path / ".venv" / "bin" / "python").is_file():
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKOUT with CHECKOUT/.venv/bin/python, got {text!r}")
    return name, path


def run_export(checkout: Path, results: Path, out: Path, timeout: float) -> tuple[float, float, int] | None:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one export; None when it ran past `timeout`."""
    command = ["/usr/bin/time", "-f", "%e %U %S %M", str(checkout / ".venv" / "bin" / "python"), "-m", "userturn",
               "export", str(results), "--format", "inspect", "--out", str(out)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=out.parent,
                              env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"}, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: export failed ({done.returncode}): {done.stderr[-2000:]}")
    wall, user, system, rss_kb = done.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(system), int(rss_kb) // 1024


def samples_in(out: Path) -> int:
    from inspect_ai.log import read_eval_log_sample_summaries

    return sum(len(read_eval_log_sample_summaries(str(p))) for p in out.glob("*.eval"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--build", type=build, action="append", required=True, metavar="NAME=CHECKOUT")
    parser.add_argument("--records", type=int, nargs="+", default=[5000, 10000])
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one export may take (default 1800)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-inspect-"))
    try:
        print(f"{'records':>8} {'build':>8} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9} {'samples':>8} {'log MB':>7}")
        for n in args.records:
            results = work / f"results-{n}.jsonl"
            write_results(results, n)
            for name, checkout in args.build if n % 2 == 0 else list(reversed(args.build)):
                out = work / f"logs-{n}-{name}"
                done = run_export(checkout, results, out, args.timeout)
                if done is None:
                    print(f"{n:>8} {name:>8} {'>' + format(args.timeout, 'g'):>8}", flush=True)
                    shutil.rmtree(out, ignore_errors=True)
                    continue
                wall, cpu, rss = done
                size = sum(p.stat().st_size for p in out.glob("*.eval")) / 1e6
                print(f"{n:>8} {name:>8} {wall:>8.1f} {cpu:>8.1f} {rss:>9} {samples_in(out):>8} {size:>7.1f}",
                      flush=True)
                shutil.rmtree(out)
            results.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
