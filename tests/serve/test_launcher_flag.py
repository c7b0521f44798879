"""`--launcher` on serve, probe and run: parsed, passed through to serve/, and refused where it means nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from userturn.cli import main
from userturn.orchestrate.experiment import Experiment, ModelEntry, target_source

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def experiment(**fields):
    data = {"name": "e", "models": [{"manifest": "m.yaml"}, {"manifest": "n.yaml", "launcher": "local"},
                                    {"base_url": "http://h/v1", "model": "x"}],
            "datasets": ["gsm8k"], **fields}
    return Experiment.model_validate(data)


def test_model_launcher_wins_then_flag_then_file(tmp_path: Path) -> None:
    exp = experiment(launcher="slurm")
    assert [target_source(e, exp, tmp_path).launcher for e in exp.models] == ["slurm", "local", None]
    assert [target_source(e, exp, tmp_path, "local").launcher for e in exp.models] == ["local", "local", None]
    assert target_source(ModelEntry(manifest="m.yaml"), experiment(), tmp_path).launcher == "local"


def test_probe_launcher_needs_a_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n')
    code = main(["probe", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--launcher", "slurm",
                 "--dataset", str(data), "--out", str(tmp_path / "o.jsonl"), "--tokenizer", "t"])
    assert code == 2 and "--launcher goes with --manifest" in capsys.readouterr().err


def test_serve_dry_run_with_slurm_prints_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(MANIFESTS / "qwen3.5-9b.yaml"), "--launcher", "slurm", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# --launcher slurm would run: sbatch --parsable") and "\n#!/bin/bash\n" in out
