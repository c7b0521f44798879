"""`userturn.probe(...)` and `userturn.run(...)`: the command line's front door from Python, against a 127.0.0.1
stand-in server; the same requests and records as `userturn probe` / `userturn run`, and usable inside a running
event loop (a notebook)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mock_http import MockServer, completion_handler
from results_lines import record_lines

import userturn
from userturn.cli import main

ITEMS = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                                     {"role": "assistant", "content": f"It is {2 * i}."}]} for i in range(3)]


def reply(body: dict[str, Any]) -> str:
    return f"Why {body['seed']}?"


def data(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ITEMS))
    return path


def identities(path: Path) -> list[tuple[Any, ...]]:
    return sorted((r["key"], r["user_turn"], r["status"]) for r in record_lines(path))


def test_probe_from_python_writes_what_the_command_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    items = data(tmp_path)
    with MockServer(completion_handler(reply)) as server:
        assert main(["probe", "--base-url", server.base_url, "--model", "mock", "--mode", "chat", "--dataset",
                     str(items), "--out", str(tmp_path / "cli.jsonl"), "--temperature", "0", "--temperature", "1",
                     "--samples", "2", "--perturb", "none", "--perturb", "generic", "--no-progress"]) == 0
        cli_bodies = server.bodies("/chat/completions")
        server.requests.clear()
        summary = userturn.probe(str(items), out=tmp_path / "api.jsonl", base_url=server.base_url, model="mock",
                                 mode="chat", temperatures=[0, 1], samples=2, perturbations=["none", "generic"])
        api_bodies = server.bodies("/chat/completions")
    assert (summary.ok, summary.errors, summary.skipped) == (3 * 2 * 2 * 2, 0, 0)
    assert sorted(map(json.dumps, api_bodies)) == sorted(map(json.dumps, cli_bodies))  # the same requests
    assert identities(tmp_path / "api.jsonl") == identities(tmp_path / "cli.jsonl")
    # rerun: resumed, nothing sent again
    with MockServer(completion_handler(reply)) as server:
        again = userturn.probe(str(items), out=tmp_path / "api.jsonl", base_url=server.base_url, model="mock",
                               mode="chat", temperatures=[0, 1], samples=2, perturbations=["none", "generic"])
        assert server.bodies("/chat/completions") == []
    assert (again.ok, again.skipped) == (0, 24)


def test_probe_from_python_refuses_what_the_command_refuses(tmp_path: Path) -> None:
    with pytest.raises(userturn.UserError, match="--base-url or --manifest is required"):
        userturn.probe(str(data(tmp_path)), out=tmp_path / "o.jsonl")
    with pytest.raises(userturn.UserError, match="unknown perturbation 'nope'"):
        userturn.probe(str(data(tmp_path)), out=tmp_path / "o.jsonl", base_url="http://127.0.0.1:9/v1", model="m",
                       perturbations=["nope"])
    with pytest.raises(ValueError, match="tempratures"):  # a misspelt option: pydantic names it
        userturn.probe(str(data(tmp_path)), out=tmp_path / "o.jsonl", base_url="http://127.0.0.1:9/v1", model="m",
                       tempratures=[1])
    assert not (tmp_path / "o.jsonl").exists()


def experiment_text(server: MockServer, out_dir: Path) -> str:
    return (f"name: grid\nmodels:\n  - base_url: {server.base_url}\n    model: mock\ndatasets: [items.jsonl]\n"
            f"modes: [chat]\ntemperatures: [0, 1]\nout_dir: {out_dir}\n")


def test_run_from_python_a_file_or_an_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    data(tmp_path)
    with MockServer(completion_handler(reply)) as server:
        path = tmp_path / "grid.yaml"
        path.write_text(experiment_text(server, tmp_path / "cli"))
        assert main(["run", str(path), "--no-progress"]) == 0
        result = userturn.run(path, out_dir=tmp_path / "api")
        assert result.results == tmp_path / "api" / "grid" / "results.jsonl"
        assert (result.ok, result.errors, result.failures) == (6, 0, [])
        assert identities(result.results) == identities(tmp_path / "cli" / "grid" / "results.jsonl")
        # an Experiment built in Python: its paths relative to `base`
        exp = userturn.Experiment.model_validate({
            "name": "inline", "models": [{"base_url": server.base_url, "model": "mock"}],
            "datasets": ["items.jsonl"], "modes": ["chat"], "temperatures": [0], "out_dir": str(tmp_path / "mem")})
        inline = userturn.run(exp, base=tmp_path, limit=2)
    assert inline.results == tmp_path / "mem" / "inline" / "results.jsonl"
    assert (inline.ok, len(record_lines(inline.results))) == (2, 2)


def test_the_api_runs_inside_a_running_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    items = data(tmp_path)

    async def notebook_cell(base_url: str) -> Any:
        return userturn.probe(str(items), out=tmp_path / "nb.jsonl", base_url=base_url, model="mock", mode="chat",
                              temperatures=[0])

    with MockServer(completion_handler(reply)) as server:
        summary = asyncio.run(notebook_cell(server.base_url))
    assert summary.ok == 3
