"""`userturn export --format inspect`: a judged run (two judges, a failed judgement, a generation error, two
perturbations, two temperatures) written as Inspect eval logs, read back with inspect_ai's own `read_eval_log` and
`samples_df`, and listed by a real `inspect view` on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_process import QWEN_DIR
from inspect_ai.analysis import samples_df
from inspect_ai.log import read_eval_log
from judged_grid import write_grid
from mock_http import MockServer, completion_handler
from ports import free_port

from userturn.cli import main
from userturn.report import inspect_log

TURNS = {"q0": "Why did you divide by 2 there?", "q1": "ok, zebra noted", "q2": "Can you check step two again?"}


def write_dataset(path: Path) -> Path:
    rows = []
    for i in range(4):
        msgs = [{"role": "user", "content": f"Item q{i}: Natalia sold {i} clips in April and twice as many in May."},
                {"role": "assistant", "content": f"She sold {3 * i} clips altogether. #### {3 * i}"}]
        rows.append({"id": f"q{i}", "answer": str(3 * i), "messages": msgs,
                     "meta": {"second_turn": f"And how many in June for q{i}?"}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def item_of(text: str) -> str:
    return text.split("Item ", 1)[1].split(":", 1)[0]


def probe_handler() -> Any:
    def text(body: dict[str, Any]) -> str:
        return TURNS[item_of(body["prompt"])] + "<|im_end|>"
    ok = completion_handler(text, model="m")

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and "q3" in request.content.decode():
            return httpx.Response(400, json={"error": {"message": "prompt rejected"}})
        return ok(request)
    return handle


def judge_handler(name: str) -> Any:
    """judge-a labels by the turn; judge-b agrees, except that it answers garbage about q1's "zebra" turn; judge-a
    does too on the first two zebra turns it sees (two records no judge could label)."""
    zebras = [0]

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return httpx.Response(200, json={"object": "list", "data": [{"id": name, "object": "model"}]})
        prompt = json.dumps(json.loads(request.content)["messages"])
        label = "genuine_followup" if ("divide by 2 there" in prompt or "step two again" in prompt) else "generic"
        content = json.dumps({"rationale": f"{name} says {label}", "label": label})
        if "zebra" in prompt:
            zebras[0] += 1
            if name == "judge-b" or zebras[0] <= 2:
                content = "I cannot decide."
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                      "finish_reason": "stop"}]})
    return handle


@pytest.fixture
def judged(tmp_path: Path) -> Path:
    data = write_dataset(tmp_path / "data.jsonl")
    out = tmp_path / "results.jsonl"
    with MockServer(probe_handler()) as server:
        code = main(["probe", "--base-url", server.base_url, "--model", "m", "--tokenizer", QWEN_DIR,
                     "--dataset", str(data), "--out", str(out), "--seed", "3", "--samples", "2",
                     "--temperature", "0", "--temperature", "1", "--max-tokens", "16", "--no-progress",
                     "--perturb", "none", "--perturb", "wrong_answer", "--max-retries", "0"])
    assert code == 1  # the q3 requests failed: error records
    with MockServer(judge_handler("judge-a")) as a, MockServer(judge_handler("judge-b")) as b:
        code = main(["judge", str(out), "--judge-model", "judge-a", "--judge-base-url", a.base_url,
                     "--judge-model", "judge-b", "--judge-base-url", b.base_url, "--judge-reasks", "0",
                     "--judge-max-retries", "0", "--no-progress"])
    assert code in (0, 1, 3)
    return tmp_path / "results.judged.jsonl"


def report_rows(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["report", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_judged_run_reads_back_as_inspect_logs(judged: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(["export", str(judged), "--format", "inspect", "--out", str(logs)]) == 0
    assert f"inspect view --log-dir {logs}" in capsys.readouterr().err
    files = sorted(logs.glob("*.eval"))
    assert len(files) == 1  # one model x dataset x configuration: temperature and perturbation are metadata
    log = read_eval_log(str(files[0]))
    records = [json.loads(x) for x in judged.read_text().splitlines() if '"type":"config"' not in x.replace(" ", "")]
    assert log.samples is not None and len(log.samples) == len(records) == 4 * 2 * 2 * 2
    assert log.eval.viewer is not None and log.eval.viewer.trust_content is False  # model-written text
    by_key = {r["key"]: r for r in records}
    assert {s.metadata["key"] for s in log.samples} == set(by_key)
    for sample in log.samples:
        record = by_key[sample.metadata["key"]]
        assert sample.id == f"{record['item_id']}|{record['perturbation']}|t={record['temperature']!r}"
        assert sample.epoch == record["sample"] + 1
        assert sample.metadata["temperature"] == record["temperature"]
        assert sample.metadata["perturbation"] == record["perturbation"]
        assert (sample.metadata["model"], sample.metadata["dataset"]) == ("m", record["dataset"])
        assert sample.metadata["seed"] == record["seed"] and sample.metadata["item_id"] == record["item_id"]
        assert [(m.role, m.text) for m in sample.input] == [(m["role"], m["content"]) for m in record["messages"]]
        turn = [("user", record["user_turn"])] if record["status"] == "ok" else []
        assert [(m.role, m.text) for m in sample.messages] == [
            *[(m["role"], m["content"]) for m in record["messages"]], *turn]
        assert next(iter(sample.scores)) == "outcome"  # the viewer's default score: every sample has it
        assert all(score.answer == record["user_turn"] for score in sample.scores.values())
        assert sample.target == f"And how many in June for {record['item_id']}?"
        if record["status"] == "error":  # a generation error: the sample's error, no label, no verdict
            assert sample.error is not None and "prompt rejected" in sample.error.message
            assert "label" not in sample.scores and sample.scores["outcome"].value == "generation_error"
            continue
        assert sample.output.completion == record["user_turn"]
        if record["label"] is None:  # the judges failed: visible as a failed verdict, never as a label
            assert "label" not in sample.scores and record["judge_status"] == "error"
            assert sample.scores["outcome"].value == "judge_failed"
        else:
            assert sample.scores["label"].value == record["label"]
            assert sample.scores["genuine_followup"].value == int(record["label"] == "genuine_followup")
            assert "says" in sample.scores["label"].explanation
        for verdict in record["judges"]:
            score = sample.scores[verdict["judge"]]
            assert score.value == (verdict["label"] if verdict["status"] == "ok" else "error")
    failed = [s for s in log.samples if s.scores.get("judge-b") and s.scores["judge-b"].value == "error"]
    assert len(failed) == 8 and all(s.metadata["item_id"] == "q1" for s in failed)
    unlabelled = [s for s in log.samples if s.metadata["judge_status"] == "error"]
    assert len(unlabelled) == 2 and all("label" not in s.scores for s in unlabelled)
    # the log's results are the report's rows: rate, interval and counts for each temperature x perturbation
    rows = {(r["temperature"], r["perturbation"]): r for r in report_rows(judged, capsys)}
    assert log.results is not None and len(log.results.scores) == len(rows) == 4
    for score in log.results.scores:
        row = rows[score.metadata["temperature"], score.metadata["perturbation"]]
        assert score.metrics["n"].value == row["n"] and score.metrics["followups"].value == row["followups"]
        assert score.metrics["followup_rate"].value == pytest.approx(row["followup_rate"])
        assert score.metrics["ci_low"].value == pytest.approx(row["ci_low"])
        assert score.metrics["judge_failures"].value == row["judge_failures"]
    assert log.eval.model == "m" and log.eval.model_generate_config.max_tokens == 16


def test_samples_df_counts_what_the_report_counts(judged: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(["export", str(judged), "--format", "inspect", "--out", str(logs)]) == 0
    df = samples_df(str(logs))
    for row in report_rows(judged, capsys):
        mine = df[(df["metadata_temperature"] == row["temperature"])
                  & (df["metadata_perturbation"] == row["perturbation"])]
        labelled = mine[mine["score_label"].notna()]
        assert len(labelled) == row["n"]
        assert int((labelled["score_label"] == "genuine_followup").sum()) == row["followups"]
        # the filter a researcher types in `inspect view`: T=1, wrong_answer, labelled genuine_followup
    picked = df[(df["metadata_temperature"] == 1.0) & (df["metadata_perturbation"] == "wrong_answer")
                & (df["score_label"] == "genuine_followup")]
    assert len(picked) == 4  # q0 and q2, two samples each


def test_export_inspect_needs_a_folder(judged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(judged), "--format", "inspect"]) == 2
    assert "--out DIR" in capsys.readouterr().err




@pytest.mark.slow
def test_inspect_view_lists_the_exported_logs(judged: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert main(["export", str(judged), "--format", "inspect", "--out", str(logs)]) == 0
    port = free_port()
    inspect = [sys.executable, "-c", "import sys; from inspect_ai._cli.main import main; sys.argv[0] = 'inspect'; "
               "sys.exit(main())"]  # the `inspect` console script, whichever environment runs the tests
    proc = subprocess.Popen([*inspect, "view", "--log-dir", str(logs), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        listing = None
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/log-files", timeout=2) as response:
                    listing = json.loads(response.read())
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"inspect view exited with {proc.returncode}")
                time.sleep(0.5)
        assert listing is not None, "inspect view did not answer"
        names = [Path(f["name"]).name for f in listing["files"]]
        assert sorted(names) == sorted(p.name for p in logs.glob("*.eval"))
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def recipe(doc: Path) -> str:
    """The `samples_df` recipe of docs/inspect-logs.md: the python block after the 'Counting in pandas' heading."""
    text = doc.read_text().split("## Counting in pandas", 1)[1]
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_samples_df_recipe_gives_the_report_rows(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Two models x two datasets, superseded lines, judge failures, unjudged records and generation errors: the
    docs' recipe, run on the export, has the report's n, follow-ups, rate and accuracy in every row."""
    judged = write_grid(tmp_path / "grid.jsonl")
    logs = tmp_path / "logs"
    assert main(["export", str(judged), "--format", "inspect", "--out", str(logs)]) == 0
    assert len(list(logs.glob("*.eval"))) == 4  # one per model x dataset (one configuration each)
    namespace: dict[str, Any] = {}
    exec(recipe(Path(__file__).parents[2] / "docs" / "inspect-logs.md").replace('"logs/"', repr(str(logs))),
         namespace)
    rows = namespace["rows"]
    report = [r for r in report_rows(judged, capsys) if r["n"]]
    assert len(report) == len(rows) == 16
    models = set()
    for row in report:
        mine = rows.loc[(row["model"], row["dataset"], row["mode"], row["perturbation"], row["temperature"],
                         row["config_fingerprint"])]
        assert (int(mine["n"]), int(mine["followups"])) == (row["n"], row["followups"])
        assert float(mine["followup_rate"]) == pytest.approx(row["followup_rate"], abs=1e-12)
        assert float(mine["accuracy"]) == pytest.approx(row["accuracy"], abs=1e-12)
        models.add(row["model"])
    assert models == {"model-a", "model-b"}
    pooled = namespace["df"]
    pooled = pooled[pooled.score_label.notna()]
    assert len(pooled) == sum(r["n"] for r in report)  # superseded lines are not samples


def test_a_large_configuration_is_written_in_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspect_log, "PART_SAMPLES", 10)
    monkeypatch.setattr(inspect_log, "FLUSH_EVERY", 3)
    judged = write_grid(tmp_path / "grid.jsonl", items=3, samples=1)  # 12 records per model x dataset
    done = inspect_log.export_inspect(judged, tmp_path / "logs")
    assert len(done.logs) == 8 and all("_part-" in p.name for p in done.logs)
    seen: list[str] = []
    for path in done.logs:
        log = read_eval_log(str(path))
        assert log.samples is not None and len(log.samples) in (10, 2)
        assert log.eval.metadata is not None and log.eval.metadata["part"] in ("1 of 2", "2 of 2")
        seen += [s.metadata["key"] for s in log.samples]
    assert len(seen) == len(set(seen)) == done.samples == 48


def test_the_inspect_extra_brings_what_samples_df_needs() -> None:
    """`pip install 'userturn[inspect]'` then `samples_df`: inspect_ai.analysis needs pandas and pyarrow, which
    inspect-ai itself does not require."""
    import tomllib

    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    names = {spec.split(">")[0].split("=")[0].split("<")[0].strip() for spec in extras["inspect"]}
    assert {"inspect-ai", "pandas", "pyarrow"} <= names
    assert any(spec.startswith("pandas") for spec in extras["cpu"])  # the README's install: records_df, rows_df
