"""Every bad path is one line and exit 2, before anything runs; contradicting flags are refused before any dataset
loads or server launches; `--assistant-from dataset` on open conversations stops up front."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from userturn.cli import main

FIXTURE = Path(__file__).parents[1] / "fixtures" / "judges" / "report_small.jsonl"
JUDGE = ["--judge-model", "j", "--judge-base-url", "http://127.0.0.1:9/v1"]
PROBE = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--mode", "chat"]


def one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("userturn: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path or flag error must come before any command body: each one fails the test if reached."""

    from userturn.cli import export, judge, judge_eval, probe, report, rerank, show

    def reached(*_: object, **__: object) -> int:
        raise AssertionError("the command ran despite a bad path")

    for module in (probe, judge, report, export, show, rerank, judge_eval):
        monkeypatch.setattr(module, "run", reached)


def bad_paths(tmp_path: Path) -> dict[str, list[list[str]]]:
    adir = tmp_path / "adir"
    adir.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("x")
    data = str(FIXTURE)
    return {
        "is a directory": [
            ["probe", *PROBE, "--dataset", data, "--out", str(adir)],
            ["probe", *PROBE, "--dataset", str(adir), "--out", str(tmp_path / "o.jsonl")],
            ["judge", data, "--out", str(adir), *JUDGE],
            ["export", data, "--format", "sft", "--out", str(adir)],
            ["judge-eval", data, "--out", str(adir), *JUDGE],
        ],
        "no results files": [  # a folder of results files is read as one; an empty one is the error
            ["report", str(adir)], ["show", str(adir)], ["rerank", str(adir)], ["judge", str(adir), *JUDGE],
            ["export", str(adir), "--format", "sft"], ["compact", str(adir)], ["report", data, str(adir)],
        ],
        "not found": [
            ["report", str(tmp_path / "missing.jsonl")], ["judge", str(tmp_path / "missing.jsonl"), *JUDGE],
            ["export", str(tmp_path / "missing.jsonl"), "--format", "sft"],
            ["show", str(tmp_path / "missing.jsonl")], ["rerank", str(tmp_path / "missing.jsonl")],
            ["report", data, str(tmp_path / "missing.jsonl")], ["compact", str(tmp_path / "missing.jsonl")],
            ["probe", *PROBE, "--dataset", data, "--out", str(tmp_path / "o.jsonl"), "--chat-template",
             str(tmp_path / "missing.jinja")],
        ],
        "is a file, not a directory": [  # a missing parent is created; a parent that is a file is the error
            ["probe", *PROBE, "--dataset", data, "--out", str(afile / "o.jsonl")],
            ["judge", data, "--out", str(afile / "o.jsonl"), *JUDGE],
            ["export", data, "--format", "sft", "--out", str(afile / "sub" / "o.jsonl")],
            ["report", data, "--plots", str(afile)], ["report", data, "--html", str(afile / "r.html")],
            ["run", "smoke", "--out-dir", str(afile)],
        ],
    }


@pytest.mark.parametrize("kind", ["is a directory", "not found", "is a file, not a directory", "no results files"])
def test_every_bad_path_is_one_line_and_exit_2(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               nothing_runs: None) -> None:
    for argv in bad_paths(tmp_path)[kind]:
        assert main(argv) == 2, argv
        one_line_error(capsys, kind)


def test_unreadable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_runs: None,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == FIXTURE else real_access(p, mode))
    for command in (["report"], ["show"], ["rerank"], ["export"], ["judge"]):
        extra = {"export": ["--format", "sft"], "judge": JUDGE}.get(command[0], [])
        assert main([*command, str(FIXTURE), *extra]) == 2
        one_line_error(capsys, "cannot read", str(FIXTURE))


def test_missing_parent_directories_are_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "deeper" / "sft.jsonl"
    assert main(["export", str(FIXTURE), "--format", "sft", "--out", str(out)]) == 0
    assert out.is_file() and out.read_text()


@pytest.mark.parametrize("flags, needle", [
    (["--manifest", "quickstart-cpu", "--base-url", "http://127.0.0.1:9/v1"], "--manifest launches its own server"),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--launcher", "slurm"], "--launcher goes with --manifest"),
    (["--model", "m"], "--base-url or --manifest is required"),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--assistant-from", "dataset",
      "--assistant-temperature", "0.5"], "--assistant-temperature set how the model writes"),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--mode", "chat", "--chat-template", str(FIXTURE)],
     "--chat-template renders raw prompts"),
])
def test_conflicting_flags_are_refused_before_anything_launches(
        flags: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import userturn.client.data.loaders as loaders
    import userturn.orchestrate.run_builder as run_builder

    def launched(*_: object, **__: object) -> None:
        raise AssertionError("a server was launched or a dataset loaded despite conflicting flags")

    monkeypatch.setattr(run_builder, "open_target", launched)
    monkeypatch.setattr(loaders, "load_items", launched)
    argv = ["probe", *flags, "--dataset", str(tmp_path / "never-read.jsonl"), "--out", str(tmp_path / "o.jsonl")]
    assert main(argv) == 2
    one_line_error(capsys, needle)


def test_assistant_from_dataset_on_open_conversations_is_exit_2_up_front(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import userturn.orchestrate.run_builder as run_builder

    def launched(*_: object, **__: object) -> None:
        raise AssertionError("the target was opened")

    monkeypatch.setattr(run_builder, "open_target", launched)
    data = tmp_path / "open.jsonl"
    data.write_text('{"id": "done", "messages": [{"role": "user", "content": "q"}, '
                    '{"role": "assistant", "content": "a"}]}\n'
                    '{"id": "open-1", "messages": [{"role": "user", "content": "q"}]}\n')
    out = tmp_path / "o.jsonl"
    assert main(["probe", *PROBE, "--dataset", str(data), "--out", str(out), "--assistant-from", "dataset"]) == 2
    one_line_error(capsys, "item 'open-1' ends with a user turn", "--assistant-from model")
    assert not out.exists()  # no error records written
