"""How the command line answers a mistake or a failure: an unknown flag with the flag it most likely begins, an
experiment file's unknown key the same way in one line naming file and key, `out_dir:` relative to the experiment
file, and one retry command on the screen of a run whose inline judge failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mock_http import MockServer, completion_handler

from userturn.cli import main


def test_a_cut_short_flag_is_answered_with_the_flag_it_begins(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["probe", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dataset", "d.jsonl", "--out", "o",
              "--temp", "1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--temp (did you mean --temperature?) [value not shown]" in err, err
    with pytest.raises(SystemExit):  # a typo that begins no flag still gets the closest one
        main(["probe", "--dataset", "d", "--out", "o", "--tempreature", "1"])
    assert "--tempreature (did you mean --temperature?)" in capsys.readouterr().err


def test_an_unknown_experiment_key_is_one_line_with_the_key_meant(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.yaml"
    path.write_text("name: e\ntemprature: [1]\nmodels:\n  - base_url: http://127.0.0.1:9/v1\n    model: m\n"
                    "    max_token: 3\ndatasets:\n  - spec: gsm8k\n    limt: 3\n")
    assert main(["run", str(path), "--dry-run"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"userturn: error: {path}: models.0: unknown key 'max_token' (did you mean max_tokens?); "
                     "datasets.0: unknown key 'limt' (did you mean limit?); unknown key 'temprature' (did you mean "
                     "temperatures?)"]


ITEM = {"id": "a", "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}


def test_out_dir_in_an_experiment_file_is_relative_to_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "items.jsonl").write_text(json.dumps(ITEM) + "\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with MockServer(completion_handler()) as server:
        path = folder / "e.yaml"
        path.write_text(f"name: e\nmodels: [{{base_url: {server.base_url}, model: mock}}]\ndatasets: [items.jsonl]\n"
                        "modes: [chat]\nout_dir: out\n")
        assert main(["run", str(path), "--no-progress"]) == 0
        assert (folder / "out" / "e" / "results.jsonl").is_file()
        assert not (elsewhere / "out").exists()
        # --out-dir stays relative to the working directory, as every flag's path
        assert main(["run", str(path), "--no-progress", "--out-dir", "flag"]) == 0
        assert (elsewhere / "flag" / "e" / "results.jsonl").is_file()


def test_a_run_whose_inline_judge_failed_shows_one_retry_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    monkeypatch.setenv("COLUMNS", "1000")
    (tmp_path / "items.jsonl").write_text(json.dumps(ITEM) + "\n")
    with MockServer(completion_handler(lambda body: "no verdict here")) as server:
        path = tmp_path / "e.yaml"
        path.write_text(f"name: e\nmodels: [{{base_url: {server.base_url}, model: mock}}]\ndatasets: [items.jsonl]\n"
                        f"modes: [chat]\njudges: [{{model: mock, base_url: {server.base_url}}}]\n"
                        f"out_dir: {tmp_path / 'runs'}\n")
        assert main(["run", str(path), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    screen = out + err
    assert "have no label because the judge failed" in err
    assert "userturn judge" not in screen  # the report's notice names the run's retry, not a second command
    assert "Retry exactly those (keeps every ok verdict): rerun the same command" in screen
