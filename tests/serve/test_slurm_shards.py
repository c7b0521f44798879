"""`run --workers N --launcher slurm` (serve.slurm_shards): the job array's script run by bash outside SLURM, and the
whole path against stand-in sbatch/squeue/scancel that run the array's tasks as local processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_slurm import fake_slurm

from userturn.serve.slurm_shards import SHARD, ArrayResources, render_shard_array

SLEEPER = "import sys, time; print('shard', sys.argv[1], flush=True); time.sleep(60)"


def script(tmp_path: Path, command: list[str], count: int = 3) -> Path:
    path = tmp_path / "shards.sbatch"
    path.write_text(render_shard_array(command, count, name="my exp",
                                       resources=ArrayResources(sbatch_args=("--partition=cpu",))))
    return path


def run_task(path: Path, task: int, status_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_JOB_ID": "77",
           "USERTURN_SHARD_EXIT_DIR": str(status_dir)}
    return subprocess.Popen(["bash", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_the_script_asks_for_an_array_of_n_and_is_valid_bash(tmp_path: Path) -> None:
    path = script(tmp_path, ["/opt/py thon", "-m", "userturn", "run", "/x/e.yaml", "--shard", SHARD])
    text = path.read_text()
    assert "#SBATCH --array=1-3\n" in text and "#SBATCH --job-name=userturn-my-exp-shards\n" in text
    assert "#SBATCH --partition=cpu\n" in text and "#SBATCH --open-mode=append\n" in text
    assert "'/opt/py thon' -m userturn run /x/e.yaml --shard \"$SHARD\" &" in text
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).returncode == 0
    with pytest.raises(ValueError, match="no __USERTURN_SHARD__ word"):
        render_shard_array(["true"], 2, name="x")


def test_a_task_runs_its_shard_and_records_its_exit_status(tmp_path: Path) -> None:
    status = tmp_path / "exit"
    status.mkdir()
    (status / "2").write_text("0\n")  # an earlier run's status: removed when the task starts again
    path = script(tmp_path, [sys.executable, "-c", "import sys; print('shard', sys.argv[1]); sys.exit(3)", SHARD])
    proc = run_task(path, 2, status)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 3, out
    assert "userturn: shard 2/3 (job 77 task 2" in out and "shard 2/3\n" in out
    assert (status / "2").read_text() == "3\n" and not (status / "2.tmp").exists()


def test_scancel_stops_the_shard_and_its_status_says_so(tmp_path: Path) -> None:
    status = tmp_path / "exit"
    status.mkdir()
    proc = run_task(script(tmp_path, [sys.executable, "-c", SLEEPER, SHARD]), 1, status)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while proc.stdout.readline() != "shard 1/3\n":  # the shard's own line: it is running
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)  # what scancel sends the batch script
    proc.wait(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM  # the script's exit, not a death by the signal (-15)
    assert (status / "1").read_text() == f"{128 + signal.SIGTERM}\n"


# Stand-ins: sbatch runs every task of the array as a local process (as SLURM would, with the script's environment),
# squeue lists the tasks still alive, scancel terminates them.




def whole_and_array(tmp_path: Path, env: dict[str, str], perturbations: str, *, timeout: int
                    ) -> subprocess.CompletedProcess[str]:
    """Experiment `arr` (10 items, a loopback model, T=0.5, `perturbations`) run whole into `whole/` (must exit 0),
    then as `run --workers 2 --launcher slurm` into `split/`: that second run."""
    from cli_process import QWEN_DIR, USERTURN
    from loopback_server import LoopbackServer
    from shard_runs import write_dataset

    write_dataset(tmp_path / "data.jsonl", n=10)
    with LoopbackServer() as server:
        (tmp_path / "exp.yaml").write_text(
            f"name: arr\nmodels: [{{base_url: {server.base_url}, model: loopback, tokenizer: {QWEN_DIR}}}]\n"
            f"datasets: [data.jsonl]\nperturbations: [{perturbations}]\ntemperatures: [0.5]\n")

        def run(*flags: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*USERTURN, "run", "exp.yaml", *flags], capture_output=True, text=True,
                                  timeout=timeout, env=env, cwd=tmp_path)

        whole = run("--out-dir", "whole", "--no-progress")
        assert whole.returncode == 0, whole.stderr
        return run("--out-dir", "split", "--workers", "2", "--launcher", "slurm")


@pytest.mark.slow
def test_run_workers_on_slurm_submits_one_array_and_writes_the_unsharded_records(tmp_path: Path) -> None:
    from shard_runs import comparable

    fake, env = fake_slurm(tmp_path)
    split = whole_and_array(tmp_path, env, "none, swap", timeout=240)
    assert split.returncode == 0, split.stderr
    run_dir = tmp_path / "split" / "arr"
    assert "userturn: submitted slurm job array 77 (2 shards; script" in split.stderr
    assert "2 of 2 shards finished" in split.stderr
    args = (fake / "sbatch.args").read_text()
    assert f"--chdir={tmp_path}" in args and f"USERTURN_SHARD_EXIT_DIR={run_dir / 'slurm-shards' / 'exit'}" in args
    for task in (1, 2):
        assert (run_dir / "slurm-shards" / "exit" / str(task)).read_text() == "0\n"
        log = (run_dir / "slurm-shards" / f"77_{task}.log").read_text()
        assert f"userturn: shard {task}/2 (job 77 task {task}" in log
    shards = [run_dir / f"results.shard-{i}-of-2.jsonl" for i in (1, 2)]
    assert comparable(*shards) == comparable(tmp_path / "whole" / "arr" / "results.jsonl")


def test_an_array_task_that_left_no_status_counts_as_failed(tmp_path: Path) -> None:
    from userturn.serve.slurm_launcher import SlurmJob
    from userturn.serve.slurm_shards import NO_STATUS, ShardArray, wait_for_shards

    status = tmp_path / "exit"
    status.mkdir()
    (status / "1").write_text("0\n")
    (status / "3").write_text("5\n")
    array = ShardArray(SlurmJob("77", 3, tmp_path), 3, status)
    answers = iter([{"77_2": "RUNNING", "77_3": "PENDING (Priority)"}, {"77_2": "RUNNING"}, {}])
    array.job.states = lambda: next(answers)  # type: ignore[method-assign]
    said: list[str] = []
    assert wait_for_shards(array, said.append, sleep=lambda _s: None) == [0, NO_STATUS, 5]
    assert said == ["slurm job array 77: 2/3 shards done; 77_2 RUNNING, 77_3 PENDING (Priority)",
                    "slurm job array 77: 2/3 shards done; 77_2 RUNNING"]


@pytest.mark.slow
def test_sigterm_cancels_the_array_and_every_shard_stops(tmp_path: Path) -> None:
    import psutil
    from cli_process import QWEN_DIR, USERTURN
    from loopback_server import LoopbackServer
    from results_lines import record_lines
    from shard_runs import write_dataset

    fake, env = fake_slurm(tmp_path)
    write_dataset(tmp_path / "data.jsonl", n=12)
    with LoopbackServer("--latency-ms", "400") as server:
        (tmp_path / "exp.yaml").write_text(
            f"name: arr\nmodels: [{{base_url: {server.base_url}, model: loopback, tokenizer: {QWEN_DIR}}}]\n"
            "datasets: [data.jsonl]\ntemperatures: [1.0]\nsamples: 3\nconcurrency: 1\n")
        parent = subprocess.Popen([*USERTURN, "run", "exp.yaml", "--workers", "2", "--launcher", "slurm"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        shards = [tmp_path / "runs" / "arr" / f"results.shard-{i}-of-2.jsonl" for i in (1, 2)]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(p.exists() and record_lines(p) for p in shards):
            time.sleep(0.1)
        tasks = [psutil.Process(int(line.split()[1])) for line in (fake / "pids").read_text().splitlines()]
        parent.send_signal(signal.SIGTERM)
        _, err = parent.communicate(timeout=60)
    assert parent.returncode == 128 + signal.SIGTERM, err
    assert "userturn: cancelling slurm job array 77" in err and (fake / "scancel.args").read_text() == "77\n"
    _, alive = psutil.wait_procs(tasks, timeout=30)
    assert not alive
    statuses = [(tmp_path / "runs" / "arr" / "slurm-shards" / "exit" / str(t)).read_text() for t in (1, 2)]
    assert statuses == [f"{128 + signal.SIGTERM}\n"] * 2  # each shard was stopped, keeping its records
    assert 0 < sum(len(record_lines(p)) for p in shards) < 36


@pytest.fixture
def cluster() -> str:
    """A real SLURM cluster's node states (`../shared/tools/slurm-localhost.sh start`), else a skip (a failure under
    USERTURN_REQUIRE_SLURM=1, as in tests/serve/test_slurm_cluster.py)."""
    import re
    import shutil

    proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20, check=False) \
        if shutil.which("sinfo") else None
    states = proc.stdout.strip() if proc is not None and proc.returncode == 0 else ""
    if not re.search(r"idle|mix|alloc", states):
        why = f"no SLURM cluster answers (sinfo: {states!r}); start one with ../shared/tools/slurm-localhost.sh"
        if os.environ.get("USERTURN_REQUIRE_SLURM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return states


@pytest.mark.slow
def test_on_a_real_cluster_the_array_shards_report_as_the_unsharded_run(cluster: str, tmp_path: Path) -> None:
    """`run --workers 2 --launcher slurm` on a real SLURM: one array job, its two tasks write the records and the
    report of the unsharded run, and leave nothing queued."""
    from shard_runs import comparable, same_report

    from userturn.serve.slurm_launcher import ACTIVE_STATES

    split = whole_and_array(tmp_path, {**os.environ, "OPENAI_API_KEY": ""}, "none, swap, wrong_answer", timeout=400)
    assert split.returncode == 0, split.stderr[-3000:]
    job = split.stderr.split("submitted slurm job array ", 1)[1].split()[0]
    queued = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"], capture_output=True, text=True,
                            timeout=20, check=False).stdout.split()
    assert not set(queued) & ACTIVE_STATES
    run_dir = tmp_path / "split" / "arr"
    assert [(run_dir / "slurm-shards" / "exit" / str(t)).read_text() for t in (1, 2)] == ["0\n", "0\n"]
    shards = [run_dir / f"results.shard-{i}-of-2.jsonl" for i in (1, 2)]
    whole_file = tmp_path / "whole" / "arr" / "results.jsonl"
    assert comparable(*shards) == comparable(whole_file)
    merged = tmp_path / "merged.jsonl"
    merged.write_bytes(b"".join(p.read_bytes() for p in shards))
    same_report(merged, whole_file, run_dir)
