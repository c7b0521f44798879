"""k > 1 samples at temperature 0 are k identical greedy generations: one warning line per target, from where the
settings are resolved (`run_builder.open_target`), for `probe` and `run` alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_process import QWEN_DIR
from mock_http import MockServer, completion_handler

from userturn.cli import main
from userturn.core.options import ProbeOptions
from userturn.orchestrate.run_builder import greedy_samples_warning


@pytest.mark.parametrize(("temperatures", "samples", "warns"), [
    ([0.0], 4, True), ([0.0, 0.7], 2, True), ([0.7, 1.0], 4, False), ([0.0], 1, False),
])
def test_warning_only_for_several_samples_at_temperature_zero(temperatures, samples, warns):
    warning = greedy_samples_warning(ProbeOptions(temperatures=temperatures, samples=samples))
    assert (warning is not None) == warns
    if warning:
        assert warning.startswith(f"userturn: warning: {samples} samples per item at temperature 0") \
            and "\n" not in warning


def test_probe_prints_the_warning_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"{i}?"},
                                        {"role": "assistant", "content": "It is."}]}) + "\n" for i in range(2)))
    with MockServer(completion_handler(lambda body: "Why?<|im_end|>", model="m")) as server:
        for temperature, expected in (("0", 1), ("0.7", 0)):
            out = tmp_path / f"t{temperature}.jsonl"
            assert main(["probe", "--base-url", server.base_url, "--model", "m", "--tokenizer", QWEN_DIR,
                         "--dataset", str(data), "--out", str(out), "--samples", "3", "--temperature", temperature,
                         "--no-progress"]) == 0
            err = capsys.readouterr().err
            assert err.count("samples per item at temperature 0") == expected, err


def test_no_shipped_experiment_asks_several_greedy_samples() -> None:
    """Every model of every shipped probe experiment, with its manifest's settings resolved."""
    from userturn.core.shipped import shipped_names
    from userturn.orchestrate.experiment import load_experiment, model_options

    checked = 0
    for name in shipped_names("experiments"):
        if name == "posttrain":  # a post-training file, not a probe grid
            continue
        exp, base = load_experiment(name)
        for entry in exp.models:
            options = model_options(entry, exp, base)
            assert greedy_samples_warning(options) is None, (name, entry.label, options.temperatures)
            checked += 1
    assert checked >= 20  # paper and paper-greedy: 11 models each, and smoke


def test_the_paper_grid_has_the_perturbations_of_the_validity_check() -> None:
    from userturn.orchestrate.experiment import load_experiment

    for name, temperatures, samples in (("paper", [0.3, 0.6, 1.0, 1.2], 4), ("paper-greedy", [0.0], 1)):
        exp, _ = load_experiment(name)
        assert (exp.temperatures, exp.samples) == (temperatures, samples)
        assert exp.perturbations == ["none", "wrong_answer", "swap", "remove", "generic"]
