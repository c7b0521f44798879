"""The `userturn` entry point: suggestions for mistyped subcommands, choices and flags, defaults in every --help,
SIGTERM ended like Ctrl-C (the resume hint; exit 143), `posttrain` checking its extra before any stage."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import signal
from pathlib import Path

import pytest

from userturn.cli import build_parser, main
from userturn.core import aio


def test_mistyped_subcommand_choice_and_flag_get_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in ((["reprot", "x"], "(did you mean report?)"),
                         (["report", "x", "--format", "cvs"], "(did you mean csv?)"),
                         (["report", "x", "--jsn"], "unrecognized arguments: --jsn (did you mean --json?)"),
                         (["report", "x", "--modle=m"], "--modle=[value not shown] (did you mean --model?)")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit):
        main(["report", "x", "--zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err  # nothing close: no guess


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_option_with_a_default_states_it_in_help() -> None:
    for name, parser in commands().items():
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
                continue
            help_text = " ".join(((action.help or "") % {"default": action.default}).split())
            assert "default" in help_text.lower() or f"default: {action.default}" in text, (name, action.dest)
    train = " ".join(commands()["train"].format_help().split())
    assert "DPO beta (default: 0.1)" in train and "LoRA rank (alpha = 2R) (default: 16)" in train
    assert "--epochs E default: 1.0" in train


def test_sigterm_ends_a_command_like_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text("")
    cleaned = []

    async def long_run() -> None:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(30)
        finally:
            cleaned.append(True)  # the run's own clean-up ran (servers stopped, files closed)

    def command(args: argparse.Namespace) -> int:
        aio.run(long_run())
        return 0

    monkeypatch.setattr("userturn.cli.report.run", command)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert main(["report", str(results)]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert cleaned == [True]
    assert capsys.readouterr().err == ("userturn: terminated (SIGTERM); completed records are kept, rerun the same "
                                       "command to resume\n")


def test_posttrain_checks_its_extra_before_any_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    monkeypatch.setattr("userturn.client.data.loaders.load_items", lambda *a, **k: pytest.fail("a stage started"))
    assert main(["posttrain", "posttrain", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "userturn: error: training needs trl: pip install 'userturn[train]'\n"


def test_probe_ends_with_the_command_to_run_next() -> None:
    from userturn.cli.probe import next_step
    from userturn.client.probe.pipeline import ProbeSummary

    plain = ProbeSummary(total=4, skipped=0, ok=4, errors=0, elapsed_s=1.0)
    assert next_step(plain, "runs/x.jsonl") == (
        "next: label the turns with a judge model: userturn judge runs/x.jsonl --judge-base-url URL --judge-model "
        "NAME (then userturn report runs/x.judged.jsonl)")
    judged = ProbeSummary(total=4, skipped=0, ok=4, errors=0, elapsed_s=1.0, judged=4)
    assert next_step(judged, "runs/x.jsonl").startswith("next: userturn report runs/x.jsonl")


def test_sigterm_while_a_server_is_launched_still_gives_the_resume_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from userturn.serve.launcher import terminate_on_sigterm

    results = tmp_path / "r.jsonl"
    results.write_text("")

    def command(args: argparse.Namespace) -> int:
        with terminate_on_sigterm():  # what `launch` wraps a manifest's servers in
            signal.raise_signal(signal.SIGTERM)
        return 0

    monkeypatch.setattr("userturn.cli.report.run", command)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert main(["report", str(results)]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "terminated (SIGTERM); completed records are kept, rerun the same command" in capsys.readouterr().err


def test_sigterm_during_serve_says_the_servers_were_stopped(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`serve` writes no records: its stop line says what it did, not how to resume records."""
    from userturn.serve.launcher import terminate_on_sigterm

    def command(args: argparse.Namespace) -> int:
        with terminate_on_sigterm():
            signal.raise_signal(signal.SIGTERM)
        return 0

    monkeypatch.setattr("userturn.cli.serve.run", command)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert main(["serve", "quickstart-cpu"]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err == "userturn: terminated (SIGTERM); the servers it started were stopped\n"


def test_a_reader_that_goes_away_ends_the_output_quietly() -> None:
    """`userturn list | head -1`: exit 141 as a shell tool would, no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "userturn", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the listing is written
    err = proc.stderr.read().decode()
    assert proc.wait() == 128 + signal.SIGPIPE and err == "", err
