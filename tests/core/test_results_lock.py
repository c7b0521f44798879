"""One writer per results file: two real processes (`probe`, `judge`, `run`) and kill -9 of the holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_process import QWEN_DIR, USERTURN, assert_one_line_error, probe, write_dataset
from loopback_server import LoopbackServer
from results_lines import record_lines

from userturn.core import results_lock
from userturn.core.jsonl import JsonlWriter
from userturn.core.results_lock import ResultsLocked, lock_path_for

pytestmark = pytest.mark.slow

HOLDER = """
import sys, time
from userturn.core.results_lock import acquire
acquire(sys.argv[1])
print("LOCKED", flush=True)
time.sleep(600)
"""


def hold_lock(path: Path) -> subprocess.Popen:
    """Another process holding the writer lock of `path` until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "LOCKED"
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_second_writer_in_another_process_is_refused_and_named(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    holder = hold_lock(path)
    try:
        with pytest.raises(ResultsLocked, match=rf"^{path} is being written by another process \(pid {holder.pid} "
                                                r"on .*, `python -c .*`, since \d{4}-\d\d-\d\dT.*Z\); wait for it"):
            JsonlWriter(path)
        assert not path.exists()  # refused before touching the results file
    finally:
        stop(holder)
    with JsonlWriter(path) as writer:  # kill -9 released it (the kernel drops the flock)
        writer.write_line(b'{"x":1}\n')
    assert not lock_path_for(path).exists()  # a clean release removes the sidecar


def test_lock_is_reentrant_within_a_process(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with results_lock.results_lock(path):
        with JsonlWriter(path):
            pass
        assert lock_path_for(path).exists()  # still held by the outer block
        holder = subprocess.run([sys.executable, "-c", HOLDER, str(path)], capture_output=True, text=True,
                                timeout=60)
        assert holder.returncode == 1 and "ResultsLocked" in holder.stderr
    assert not lock_path_for(path).exists()


def test_two_probes_on_one_file(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data.jsonl", 40)
    out = tmp_path / "out.jsonl"
    with LoopbackServer("--latency-ms", "300") as slow, LoopbackServer() as other:
        common = ["--model", "loopback", "--dataset", str(data), "--out", str(out), "--tokenizer", QWEN_DIR,
                  "--concurrency", "2", "--no-progress"]
        first = subprocess.Popen([*USERTURN, "probe", "--base-url", slow.base_url, *common],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={**os.environ, "OPENAI_API_KEY": ""})
        try:
            deadline = time.monotonic() + 60
            while not out.exists() or not out.stat().st_size:
                assert time.monotonic() < deadline and first.poll() is None, "the first probe did not start"
                time.sleep(0.05)
            second = probe("--base-url", other.base_url, *common)
            assert_one_line_error(second, 2, f"{out} is being written by another process (pid {first.pid}",
                                  "`userturn probe --base-url")
            assert other.stats().get("completions", 0) == 0  # refused before sending anything
            first.send_signal(signal.SIGKILL)
            first.wait()
            third = probe("--base-url", other.base_url, *common)  # the lock died with the killed process
            assert third.returncode == 0, third.stderr
            assert 0 < other.stats()["completions"] < 40  # it resumed: only what the first had not written
        finally:
            if first.poll() is None:
                stop(first)
    ok_keys = [x["key"] for x in record_lines(out) if x["status"] == "ok"]
    assert len(ok_keys) == len(set(ok_keys)) == 40  # nothing doubled


def test_second_judge_on_one_output_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_bytes((Path(__file__).parents[1] / "fixtures" / "judges" / "results_small.jsonl").read_bytes())
    out = tmp_path / "results.judged.jsonl"
    holder = hold_lock(out)
    try:
        proc = subprocess.run([*USERTURN, "judge", str(results), "--judge-base-url", "http://127.0.0.1:9/v1",
                               "--judge-model", "j", "--no-progress"], capture_output=True, text=True, timeout=60)
    finally:
        stop(holder)
    assert_one_line_error(proc, 2, f"{out} is being written by another process (pid {holder.pid}")


def test_second_experiment_run_on_one_results_file_is_refused(tmp_path: Path) -> None:
    write_dataset(tmp_path / "data.jsonl", 1)
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(f"""name: locked
out_dir: {tmp_path / "runs"}
models:
  - base_url: http://127.0.0.1:9/v1
    model: m
    tokenizer: {QWEN_DIR}
datasets: [data.jsonl]
""")
    results = tmp_path / "runs" / "locked" / "results.jsonl"
    holder = hold_lock(results)
    try:
        proc = subprocess.run([*USERTURN, "run", str(experiment), "--no-progress"], capture_output=True, text=True,
                              timeout=60)
    finally:
        stop(holder)
    if "is being written" not in proc.stderr:
        pytest.fail(f"the run was not stopped by the lock: {proc.stderr}")
    assert_one_line_error(proc, 2, f"{results} is being written by another process (pid {holder.pid}")


MOUNTS = """/dev/sda1 / ext4 rw,relatime 0 0
server:/export /mnt/nfs nfs4 rw,vers=4.2 0 0
10.0.0.1@tcp:/scratch /mnt/my\\040lustre lustre rw,flock 0 0
"""


def test_filesystem_type_is_the_longest_mount_above_the_path(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    kinds = [results_lock.filesystem_type(p, str(mounts)) for p in
             ("/mnt/nfs/runs/a.jsonl", "/mnt/my lustre/r.jsonl", "/mnt/nfsother/a", "/", "/mnt/nfs")]
    assert kinds == ["nfs4", "lustre", "ext4", "ext4", "nfs4"]
    assert results_lock.filesystem_type("/x", str(tmp_path / "missing")) is None


def test_a_lock_on_a_network_file_system_warns_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nfs:/e {tmp_path} nfs rw 0 0\n")
    monkeypatch.setattr(results_lock, "MOUNTS", str(mounts))
    out = tmp_path / "runs" / "r.jsonl"
    for _ in range(2):
        with results_lock.results_lock(out):
            pass
    err = capsys.readouterr().err.splitlines()
    assert err == [f"userturn: warning: {out}.lock is on nfs, where the writer lock (flock) may hold on one node "
                   "only: run one writer per results file across nodes"]
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\ntmpfs {tmp_path} tmpfs rw 0 0\n")
    with results_lock.results_lock(tmp_path / "local.jsonl"):
        pass
    assert capsys.readouterr().err == ""


def test_the_sidecar_and_the_refusal_hold_no_secret(tmp_path: Path) -> None:
    """The holder's command line carries a proxy password and a token: the sidecar (mode 0600) and the second
    writer's refusal show it redacted; a raw 0644 sidecar left by another version is redacted on reading and made
    0600 by the next holder."""
    path = tmp_path / "out.jsonl"
    secret_args = ["--proxy", "http://alice:pw-Zq81xYw@127.0.0.1:3128", "--hf-token", "tok-SECRET-1234"]
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), *secret_args], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "LOCKED"
        sidecar = lock_path_for(path)
        assert sidecar.stat().st_mode & 0o777 == 0o600
        text = sidecar.read_text()
        with pytest.raises(ResultsLocked) as refused:
            JsonlWriter(path)
    finally:
        stop(proc)
    for shown in (text, str(refused.value)):
        assert "pw-Zq81xYw" not in shown and "tok-SECRET-1234" not in shown, shown
        assert "http://[redacted]@127.0.0.1:3128" in shown and "--hf-token [redacted]" in shown, shown
    stale = lock_path_for(path)
    stale.write_text('{"pid": 1, "host": "h", "command": "userturn probe --proxy http://a:pw-Zq81xYw@h:1", '
                     '"started": "2026-01-01T00:00:00Z"}\n')
    os.chmod(stale, 0o644)
    assert "pw-Zq81xYw" not in results_lock.describe_holder(stale)
    with JsonlWriter(path):
        assert stale.stat().st_mode & 0o777 == 0o600
        assert "pw-Zq81xYw" not in stale.read_text()
