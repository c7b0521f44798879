"""Sharded runs end to end, as real processes against a real loopback model server and a real judge server on
127.0.0.1: the shards of `probe --shard I/N` and of `run --workers N`, concatenated, hold the records of the
unsharded run and give its report."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_process import QWEN_DIR, USERTURN
from loopback_server import LoopbackServer
from results_lines import config_lines, record_lines
from shard_runs import JUDGE_SERVER, comparable, report_json, same_report, userturn, write_dataset

from userturn.core.results_lock import results_lock
from userturn.core.shards import shard_of

pytestmark = pytest.mark.slow





@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    """(model base URL, judge base URL)."""
    judge = subprocess.Popen([sys.executable, str(JUDGE_SERVER), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = judge.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("READY "), line
        with LoopbackServer() as model:
            yield model.base_url, f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        judge.terminate()
        judge.wait(timeout=10)






def concatenated(target: Path, *paths: Path) -> Path:
    target.write_bytes(b"".join(p.read_bytes() for p in paths))
    return target








def flat(value: object, key: str = "") -> list[tuple[str, object]]:
    """(path, leaf) of every leaf of a JSON value, in order."""
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in flat(v, f"{key}.{k}")]
    if isinstance(value, list):
        return [pair for n, v in enumerate(value) for pair in flat(v, f"{key}[{n}]")]
    return [(key, value)]


@pytest.mark.parametrize("assistant_from", ["dataset", "model"])
def test_two_probe_shards_write_the_records_and_report_of_the_unsharded_run(
        servers: tuple[str, str], tmp_path: Path, assistant_from: str) -> None:
    model_url, judge_url = servers
    data = write_dataset(tmp_path / "data.jsonl")
    common = ["--base-url", model_url, "--model", "loopback", "--dataset", str(data), "--tokenizer", QWEN_DIR,
              "--temperature", "0.7", "--samples", "2", "--perturb", "none", "--perturb", "swap", "--perturb",
              "wrong_answer", "--limit", "12", "--shuffle-seed", "5", "--assistant-from", assistant_from,
              "--no-progress", "--judge-base-url", judge_url, "--judge-model", "keyword-judge"]
    whole = tmp_path / "whole.jsonl"
    proc = userturn("probe", *common, "--out", str(whole))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out.jsonl"
    shards = [tmp_path / "out.shard-1-of-2.jsonl", tmp_path / "out.shard-2-of-2.jsonl"]
    for index, path in enumerate(shards, start=1):
        proc = userturn("probe", *common, "--out", str(out), "--shard", f"{index}/2")
        assert proc.returncode == 0, proc.stderr
        assert f"to {path} (ok" in proc.stderr
        assert {r["item_id"] for r in record_lines(path)} <= {f"q{i}" for i in range(14) if shard_of(f"q{i}", 2)
                                                              == index}
    assert not out.exists()

    expected = comparable(whole)
    assert comparable(*shards) == expected
    swapped = [r for r in expected.values() if r["perturbation"] == "swap"]
    assert swapped and all(r["meta"]["swap_partner"] for r in swapped)
    # partners across the cut: chosen (and, assistant_from model, written) as the unsharded run chose them
    assert any(shard_of(r["item_id"], 2) != shard_of(r["meta"]["swap_partner"], 2) for r in swapped)
    assert {r["assistant_source"] for r in expected.values()} == {assistant_from}
    labels = {r["label"] for r in expected.values()}
    assert None not in labels
    if assistant_from == "dataset":  # the loopback model's own answers always share a word with its follow-ups
        assert {"genuine_followup", "unrelated_query"} <= labels, labels
    # the shards write the configurations of the unsharded run (one fingerprint each), their own command lines
    fingerprints = {c["fingerprint"] for c in config_lines(whole)}
    assert [{c["fingerprint"] for c in config_lines(p)} for p in shards] == [fingerprints, fingerprints]
    # the shard is recorded in each configuration line's run (its command line), which the fingerprint leaves out
    for index, path in enumerate(shards, start=1):
        assert all(c["run"]["command"][-2:] == ["--shard", f"{index}/2"] for c in config_lines(path))

    merged = concatenated(tmp_path / "merged.jsonl", *shards)
    same_report(merged, whole, *shards)
    rows = report_json(whole)
    assert sum(row["n"] for row in rows) > 0  # the compared report measures something


def test_a_probe_split_is_resumed_with_its_own_n_only(servers: tuple[str, str], tmp_path: Path) -> None:
    model_url, _ = servers
    data = write_dataset(tmp_path / "data.jsonl", n=6)
    out = tmp_path / "out.jsonl"
    common = ["--base-url", model_url, "--model", "loopback", "--dataset", str(data), "--tokenizer", QWEN_DIR,
              "--temperature", "0", "--out", str(out), "--no-progress"]
    assert userturn("probe", *common, "--shard", "1/2").returncode == 0
    for other in (["--shard", "2/3"], []):
        proc = userturn("probe", *common, *other)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert lines[0].startswith(f"userturn: error: {tmp_path / 'out.shard-1-of-2.jsonl'} holds records of this "
                                   "run split 2 ways (N = 2)")
        assert "resume it with N = 2, or use another --out" in lines[0]
    again = userturn("probe", *common, "--shard", "1/2")
    assert again.returncode == 0 and "ok 0, errors 0, already done" in again.stderr
    assert not (tmp_path / "out.shard-1-of-3.jsonl").exists() and not out.exists()


def write_experiment(tmp_path: Path, model_url: str, judge_url: str) -> Path:
    write_dataset(tmp_path / "data.jsonl")
    path = tmp_path / "exp.yaml"
    path.write_text(f"""
name: sharded
models:
  - base_url: {model_url}
    model: loopback
    tokenizer: {QWEN_DIR}
datasets:
  - spec: data.jsonl
    limit: 12
    shuffle_seed: 3
temperatures: [0.5, 1.0]
perturbations: [none, swap, wrong_answer]
modes: [raw, chat]
assistant_from: model
assistant_samples: 2  # answers <id>#a0 and <id>#a1 of one query: cut by the query's id, into one shard
assistant_temperature: 0.7
max_tokens: 32
judges:
  - model: keyword-judge
    base_url: {judge_url}
""")
    return path


def test_run_workers_writes_the_records_and_report_of_the_unsharded_run(servers: tuple[str, str],
                                                                         tmp_path: Path) -> None:
    path = write_experiment(tmp_path, *servers)
    whole = userturn("run", str(path), "--out-dir", str(tmp_path / "whole"), "--no-progress")
    assert whole.returncode == 0, whole.stderr
    split = userturn("run", str(path), "--out-dir", str(tmp_path / "split"), "--workers", "2")
    assert split.returncode == 0, split.stderr
    run_dir = tmp_path / "split" / "sharded"
    shards = [run_dir / "results.shard-1-of-2.jsonl", run_dir / "results.shard-2-of-2.jsonl"]
    assert f"userturn: shard 1/2 writes {shards[0]}" in split.stderr
    assert f"userturn: shard 2/2 writes {shards[1]}" in split.stderr
    assert "[shard 2/2] userturn: results in" in split.stderr and "2 of 2 shards finished" in split.stderr
    # the unsharded run's printout over the shards read as one: the same turns and rule facts, then the table (its
    # rows: same_report below; the lines that name the files wrap differently)
    cut = "more turns; every turn with its key"  # the lines from here on name the files
    assert split.stdout.split(cut)[0] == whole.stdout.split(cut)[0] and cut in whole.stdout
    assert "Generated user turns" in split.stdout and "follow-up" in split.stdout
    assert not (run_dir / "results.jsonl").exists() and (run_dir / "experiment.json").is_file()
    expected = comparable(tmp_path / "whole" / "sharded" / "results.jsonl")
    assert len(expected) > 100 and comparable(*shards) == expected
    for index, shard_file in enumerate(shards, start=1):  # every sampled answer of a query in its query's shard
        assert {shard_of(r["meta"]["query_id"], 2) for r in record_lines(shard_file)} == {index}
    merged = concatenated(tmp_path / "merged.jsonl", *shards)
    same_report(merged, tmp_path / "whole" / "sharded" / "results.jsonl", run_dir)

    again = userturn("run", str(path), "--out-dir", str(tmp_path / "split"), "--workers", "2")
    assert again.returncode == 0 and again.stderr.count("0 new ok, 0 errors") == 2, again.stderr
    refused = userturn("run", str(path), "--out-dir", str(tmp_path / "split"), "--workers", "3")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "split 2 ways (N = 2); a split 3 ways would probe the same items again" in refused.stderr


def test_a_failing_shard_leaves_the_others_records_and_sets_the_exit_code(servers: tuple[str, str],
                                                                          tmp_path: Path) -> None:
    path = write_experiment(tmp_path, *servers)
    run_dir = tmp_path / "runs" / "sharded"
    with results_lock(run_dir / "results.shard-2-of-2.jsonl"):  # another writer holds shard 2's file
        proc = userturn("run", str(path), "--out-dir", str(tmp_path / "runs"), "--workers", "2")
    assert proc.returncode == 2, proc.stderr
    assert "[shard 2/2] userturn: error:" in proc.stderr and "1 of 2 shards finished" in proc.stderr
    shard2 = run_dir / "results.shard-2-of-2.jsonl"
    kept = f"completed records are kept in {shard2}" if shard2.is_file() and shard2.stat().st_size else \
        f"no record was written to {shard2}"
    assert f"userturn: shard 2/2 exited 2 ({kept}; rerun the same command to resume it)" in proc.stderr
    done = record_lines(run_dir / "results.shard-1-of-2.jsonl")
    assert done and all(r["status"] == "ok" for r in done)
    assert {shard_of(r["meta"]["query_id"], 2) for r in done} == {1}  # cut by the query (assistant_samples: 2)
    resumed = userturn("run", str(path), "--out-dir", str(tmp_path / "runs"), "--workers", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert f"[shard 1/2] userturn: results in {run_dir / 'results.shard-1-of-2.jsonl'} (0 new ok" in resumed.stderr


def test_sigterm_stops_every_shard_and_the_same_command_resumes(tmp_path: Path) -> None:
    import signal
    import time

    import psutil

    write_dataset(tmp_path / "data.jsonl", n=12)
    with LoopbackServer("--latency-ms", "400") as server:
        path = tmp_path / "exp.yaml"
        path.write_text(f"name: slow\nmodels: [{{base_url: {server.base_url}, model: loopback, tokenizer: {QWEN_DIR}}}]"
                        "\ndatasets: [data.jsonl]\ntemperatures: [1.0]\nsamples: 3\nconcurrency: 1\n")
        argv = [*USERTURN, "run", str(path), "--out-dir", str(tmp_path / "runs"), "--workers", "2"]
        parent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "OPENAI_API_KEY": ""})
        shards = [tmp_path / "runs" / "slow" / f"results.shard-{i}-of-2.jsonl" for i in (1, 2)]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(p.exists() and record_lines(p) for p in shards):
            time.sleep(0.1)
        workers = psutil.Process(parent.pid).children()
        assert len(workers) == 2
        parent.send_signal(signal.SIGTERM)
        _, err = parent.communicate(timeout=60)
        assert parent.returncode == 128 + signal.SIGTERM, err
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive  # no shard outlives the run
        partial = sum(len(record_lines(p)) for p in shards)
        assert 0 < partial < 36
        resumed = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                                 env={**os.environ, "OPENAI_API_KEY": ""})
        assert resumed.returncode == 0, resumed.stderr
    records = comparable(*shards)  # no key twice
    assert len(records) == 36 and all(r["status"] == "ok" for r in records.values())
