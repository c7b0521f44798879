"""Peak memory and time of every command that reads a whole results file, on a generated file (default 1,000,000
records): the probe's resume scan (`resume_index.scan_results`, in a child of the build's interpreter), `show --json`,
`show --limit 1000` (the table), `report --json`, and `judge` resuming (seconds to its first request).

    .venv/bin/python benchmarks/bench_read.py                              # 1M records, this checkout
    .venv/bin/python benchmarks/bench_read.py --records 100000 --only show-json --only judge
    .venv/bin/python benchmarks/bench_read.py --baseline-cmd "env PYTHONPATH=/tmp/old $PWD/.venv/bin/python -m userturn"

The file (written to a temporary folder, deleted afterwards) has the configuration lines of its five perturbations at
the top, then records as the probe writes them (current schema, GSM8K-sized conversation; `bench_report.record`),
unlabelled. Beside it, the judge's output of an interrupted `userturn judge`: every record but the last 100
labelled by the benchmark's judge panel. Each command runs as a child process; its peak RSS is its own `ru_maxrss`
(`os.wait4`) and its time the wall time from start to exit, or for `judge` from start to the first connection the
judge endpoint receives (then it is stopped). With `--baseline-cmd` another userturn build (an older commit laid
out as the wheel installs it: see benchmarks/bench_probe.py) runs each command right before this checkout's: before
and after on the same file, in the same minutes. Targets: every command <= 400 MB ("a few hundred MB"); judge's first
request <= 30 s (it reads two files of a million lines: twice the probe's resume scan).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_report import PERTURBATIONS, config_for, record  # noqa: E402

TARGET_MB, JUDGE_TARGET_S = 400.0, 30.0
COMMANDS = ["resume-scan", "show-json", "show", "report", "judge"]
TABLE_ROWS = 1000  # `show`'s table is measured to its first 1,000 rows (rich renders a few hundred rows a second)
JUDGE = "bench-judge"
UNJUDGED_TAIL = 100  # records the interrupted judge run left to do
# the probe's resume scan of the file (what `userturn probe` reads before its first request), as a build runs it
RESUME_SCAN = ("import sys; from userturn.core.resume_index import scan_results; "
               "print(len(scan_results(sys.argv[1]).ok))")


def write_files(results: Path, judged: Path, records: int) -> None:
    """The results file and the judge's output of every record but the last UNJUDGED_TAIL (see the docstring)."""
    from userturn.core.records import SCHEMA_VERSION
    from userturn.judges.panel import panel_id
    from userturn.judges.prompt import load_prompt

    sha = load_prompt().sha256
    panel = panel_id([JUDGE], sha)
    configs = {p: config_for(p) for p in PERTURBATIONS}
    head = b"".join(orjson.dumps({"type": "config", "fingerprint": fp, "config": config},
                                 option=orjson.OPT_APPEND_NEWLINE) for config, fp in configs.values())
    verdict = {"judge": JUDGE, "source": "judge", "status": "ok", "label": "genuine_followup",
               "rationale": "The turn asks about the division step.", "prompt_sha256": sha, "attempts": 1}
    written = 0
    with results.open("wb", buffering=1 << 20) as out, judged.open("wb", buffering=1 << 20) as done:
        out.write(head)
        done.write(head)
        item = 0
        while written < records:
            for p in PERTURBATIONS:
                for s in range(2):
                    if written == records:
                        break
                    rec = record(item, p, 1.0, s, "genuine_followup", configs[p])
                    del rec["config"]  # the configuration is its line at the top (current schema)
                    ordered = {"schema_version": SCHEMA_VERSION, "key": rec.pop("key"), "status": rec.pop("status"),
                               "judge_status": None, "config_fingerprint": rec.pop("config_fingerprint")}
                    ordered |= {k: v for k, v in rec.items() if k not in ("judge_status", "judges", "label",
                                                                         "label_source")}
                    out.write(orjson.dumps(ordered, option=orjson.OPT_APPEND_NEWLINE))
                    if written < records - UNJUDGED_TAIL:
                        ordered |= {"judge_status": "ok", "judges": [verdict], "label": "genuine_followup",
                                    "label_source": "judge", "judge_panel": panel}
                        done.write(orjson.dumps(ordered, option=orjson.OPT_APPEND_NEWLINE))
                    written += 1
            item += 1


def first_connection(server: socket.socket, seen: list[float]) -> None:
    try:
        conn, _ = server.accept()
        seen.append(time.monotonic())
        conn.close()
    except OSError:
        pass


def run(cmd: list[str], *, stdout: Path, port: int | None = None) -> tuple[float, float, int]:
    """(seconds, peak RSS MB, exit status) of one child; with `port`, seconds to the first connection there."""
    server = seen = None
    if port is not None:
        server = socket.create_server(("127.0.0.1", port))
        seen = []
        threading.Thread(target=first_connection, args=(server, seen), daemon=True).start()
    env = os.environ | {"COLUMNS": "200"}
    started = time.monotonic()
    with stdout.open("wb") as out:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env)
        if seen is not None:
            while not seen and child.poll() is None:
                time.sleep(0.01)
            if seen:
                child.send_signal(signal.SIGKILL)
        _, status, usage = os.wait4(child.pid, 0)
    wall = (seen[0] if seen else time.monotonic()) - started
    if server is not None:
        server.close()
    err = child.stderr.read().decode(errors="replace").strip() if child.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, -signal.SIGKILL):
        print(f"    exit {code}: {err.splitlines()[-1] if err else ''}", file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, code


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def commands(userturn: list[str], results: Path, judged: Path, work: Path) -> dict[str, tuple[list[str], bool]]:
    """name -> (argv, whether it is timed to the first request)."""
    port = 0  # filled per run
    python = userturn[:-2] if userturn[-2:] == ["-m", "userturn"] else None  # the build's interpreter and path
    scan = [] if python is None else [*python, "-c", RESUME_SCAN, str(results)]
    return {"resume-scan": (scan, False),
            "show-json": ([*userturn, "show", str(results), "--json"], False),
            "show": ([*userturn, "show", str(results), "--limit", str(TABLE_ROWS)], False),
            "report": ([*userturn, "report", str(results), "--json"], False),
            "judge": ([*userturn, "judge", str(results), "--out", str(judged), "--judge-model", JUDGE,
                       "--judge-base-url", f"http://127.0.0.1:{port}/v1", "--no-progress", "--no-model-check"],
                      True)}


def main() -> int:
    if sys.argv[1:2] == ["--write"]:
        write_files(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--only", action="append", choices=COMMANDS, default=[])
    parser.add_argument("--userturn-cmd", default=f"{sys.executable} -m userturn")
    parser.add_argument("--baseline-cmd", default=None, help="another userturn build, run before each command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_read_") as tmp:
        work = Path(tmp)
        results, judged = work / "results.jsonl", work / "results.judged.jsonl"
        started = time.monotonic()
        # written by a child: this process stays small, since a child's ru_maxrss starts from its parent's at fork
        subprocess.run([sys.executable, __file__, "--write", str(results), str(judged), str(args.records)],
                       check=True)
        backup = work / "judged.backup"
        shutil.copyfile(judged, backup)
        print(f"wrote {args.records:,} records ({results.stat().st_size / 2**20:,.0f} MiB) and the judge's output "
              f"in {time.monotonic() - started:.0f}s", flush=True)
        builds = [("before", shlex.split(args.baseline_cmd))] if args.baseline_cmd else []
        builds.append(("after" if args.baseline_cmd else "this", shlex.split(args.userturn_cmd)))
        failed = False
        for name in args.only or COMMANDS:
            for build, userturn in builds:
                argv, to_first = commands(userturn, results, judged, work)[name]
                port = free_port() if to_first else None
                if port is not None:
                    argv = [a.replace("127.0.0.1:0/", f"127.0.0.1:{port}/") for a in argv]
                wall, peak, code = run(argv, stdout=work / "out.txt", port=port)
                if to_first:
                    shutil.copyfile(backup, judged)  # the judge may have appended: the same output for each build
                ok = peak <= TARGET_MB and (wall <= JUDGE_TARGET_S if to_first else code == 0)
                failed |= not ok and build != "before"
                what = "to first request" if to_first else "wall"
                print(f"{name:10} {build:7} {wall:7.1f}s {what}, peak RSS {peak:7.0f} MB "
                      f"{'PASS' if ok else 'MISS'}", flush=True)
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
