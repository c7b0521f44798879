"""No silent switch: a dataset where some items end with an assistant turn and some do not is refused before any
request (one line: how many lack one, the first one, the flag or key that chooses), unless the user chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mock_http import MockServer, completion_handler
from results_lines import record_lines

from userturn.cli import main

ANSWERED = {"role": "assistant", "content": "It is 4."}


def write(path: Path, rows: list[tuple[str, bool]]) -> Path:
    """(id, ends with an assistant turn) per line."""
    path.write_text("".join(json.dumps({"id": item_id, "messages": [{"role": "user", "content": "2+2?"},
                                                                    *([ANSWERED] if answered else [])]}) + "\n"
                            for item_id, answered in rows))
    return path


def probe(server: MockServer, data: Path, out: Path, *extra: str) -> int:
    return main(["probe", "--base-url", server.base_url, "--model", "mock", "--mode", "chat", "--dataset", str(data),
                 "--out", str(out), "--temperature", "0", "--no-progress", *extra])


def error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_one_malformed_row_is_refused_in_one_line_before_any_request(tmp_path: Path, capsys):
    rows = [("a", True), ("b", True), ("open-1", False), ("c", True), ("open-2", False)]
    data = write(tmp_path / "mixed.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with MockServer(completion_handler()) as server:
        assert probe(server, data, out) == 2
        assert server.requests == []  # not even the endpoint check
    assert error_lines(capsys) == [
        f"userturn: error: {data}:3: item 'open-1' has no assistant turn to probe (2 of 5 items lack one, the others "
        "end with one): fix them, or choose model-written assistant turns for every item with --assistant-from model"]
    assert not out.exists()


def test_explicit_choices_and_uniform_datasets_still_run(tmp_path: Path, capsys):
    mixed = write(tmp_path / "mixed.jsonl", [("a", True), ("open-1", False)])
    with MockServer(completion_handler()) as server:
        assert probe(server, mixed, tmp_path / "model.jsonl", "--assistant-from", "model") == 0
        assert {r["assistant_source"] for r in record_lines(tmp_path / "model.jsonl")} == {"model"}
        assert probe(server, mixed, tmp_path / "dataset.jsonl", "--assistant-from", "dataset") == 2
        assert "item 'open-1' ends with a user turn" in error_lines(capsys)[-1]
        opened = write(tmp_path / "open.jsonl", [("x", False), ("y", False)])  # none has one: the model answers
        assert probe(server, opened, tmp_path / "open-out.jsonl") == 0
        assert {r["assistant_source"] for r in record_lines(tmp_path / "open-out.jsonl")} == {"model"}
        answered = write(tmp_path / "answered.jsonl", [("x", True), ("y", True)])
        assert probe(server, answered, tmp_path / "answered-out.jsonl") == 0
        assert {r["assistant_source"] for r in record_lines(tmp_path / "answered-out.jsonl")} == {"dataset"}


def experiment(tmp_path: Path, server: MockServer, extra: str = "") -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(f"name: e\nmodels:\n  - base_url: {server.base_url}\n    model: mock\ndatasets: [mixed.jsonl]\n"
                    f"modes: [chat]\ntemperatures: [0]\nout_dir: {tmp_path / 'runs'}\n{extra}")
    return path


def test_run_refuses_a_mixed_dataset_unless_the_experiment_chooses(tmp_path: Path, capsys):
    data = write(tmp_path / "mixed.jsonl", [("a", True), ("open-1", False)])
    with MockServer(completion_handler()) as server:
        path = experiment(tmp_path, server)
        for argv in (["run", str(path), "--dry-run"], ["run", str(path), "--no-progress"]):
            assert main(argv) == 2
            lead = "userturn: " if "--dry-run" in argv else "userturn: error: "  # the dry run: one line per check
            assert error_lines(capsys) == [
                f"{lead}{path}: dataset mixed.jsonl: {data}:2: item 'open-1' has no assistant turn to probe "
                "(1 of 2 items lack one, the others end with one): fix them, or choose model-written assistant turns "
                "for every item with assistant_from: model"]
        assert {r.method for r in server.requests} == {"GET"}  # the dry run's endpoint checks; no completion
        assert main(["run", str(experiment(tmp_path, server, "assistant_from: model\n")), "--no-progress"]) == 0
    records = record_lines(tmp_path / "runs" / "e" / "results.jsonl")
    assert sorted((r["item_id"], r["assistant_source"]) for r in records) == [("a", "model"), ("open-1", "model")]
