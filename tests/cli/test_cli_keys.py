"""Flags as people type them: no prefix matching on any parser; API keys from a variable or a file, a key on the
command line refused; no message shows a value given as a key; one spelling per judge setting."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import httpx
import pytest
import respx

from userturn.cli.app import build_parser, main
from userturn.cli.judge_arguments import panel_config
from userturn.client.http.endpoint import Endpoint, EndpointConfig
from userturn.client.http.keys import read_key_file
from userturn.core.errors import EndpointError, UserError

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-right-key-Zq81xYw"
PROBE = ["probe", "--dataset", "d.jsonl", "--out", "out.jsonl", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
JUDGE = ["judge", "results.jsonl", "--judge-model", "j", "--judge-base-url", "http://127.0.0.1:9/v1"]


def every_parser() -> list[argparse.ArgumentParser]:
    """The `userturn` parser and every subcommand's, recursively."""
    found, todo = [], [build_parser()]
    while todo:
        parser = todo.pop()
        found.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return found


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """(exit code, stderr) of `userturn argv`, a usage error (SystemExit) or a UserError alike."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


def test_no_parser_matches_a_prefix_of_a_flag() -> None:
    parsers = every_parser()
    assert len(parsers) > 10
    assert [p.prog for p in parsers if p.allow_abbrev] == []
    with pytest.raises(SystemExit):  # with prefix matching on, this was --api-key-env sk-right-key
        build_parser().parse_args([*PROBE, "--api-key-e", "OPENAI_API_KEY"])


def test_every_argparse_parser_of_the_project_refuses_prefixes() -> None:
    """Servers, engines, benchmarks and test servers alike: each `ArgumentParser(...)` says allow_abbrev=False."""
    sources = [p for p in ROOT.rglob("*.py") if not ({".venv", ".git", "build"} & set(p.relative_to(ROOT).parts))]
    missing = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == \
                    "ArgumentParser":
                given = {k.arg: k.value for k in node.keywords}
                value = given.get("allow_abbrev")
                if not (isinstance(value, ast.Constant) and value.value is False):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert missing == []


@pytest.mark.parametrize(("argv", "env_flag"), [
    ([*PROBE, "--api-key", KEY], "--api-key-env"), ([*PROBE, f"--api-key={KEY}"], "--api-key-env"),
    ([*PROBE, "--api-key"], "--api-key-env"), ([*JUDGE, "--judge-api-key", KEY], "--judge-api-key-env"),
])
def test_a_key_on_the_command_line_is_refused_with_the_two_ways_that_work(
        argv: list[str], env_flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = error_of(argv, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert KEY not in err
    file_flag = env_flag.replace("-env", "-file")
    assert "is refused" in err and f"{env_flag} NAME" in err and f"{file_flag} PATH" in err


def test_a_key_given_to_an_unknown_flag_is_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = error_of([*PROBE, "--openai-api-key", KEY, "--token=" + KEY], capsys)
    assert code == 2 and KEY not in err and err.count("\n") == 1, err
    assert "--openai-api-key" in err and "--token=[value not shown]" in err


@pytest.mark.parametrize(("flags", "message"), [
    (["--api-key-env", KEY], "--api-key-env takes the NAME of an environment variable"),
    (["--api-key-env", "UT_SURELY_UNSET"], "$UT_SURELY_UNSET is not set: no key sent"),
    (["--api-key-env", "sk_lower_case_unset_1234"], "the variable --api-key-env names (not shown"),
    (["--api-key-file", "/nonexistent/key"], "--api-key-file /nonexistent/key: cannot read the key file"),
    (["--api-key-env", "OPENAI_API_KEY", "--api-key-file", "k"], "--api-key-env and --api-key-file both given"),
    (["--judge-model", "j", "--judge-api-key-env", "UT_SURELY_UNSET"], "$UT_SURELY_UNSET is not set: no key sent"),
])
def test_a_bad_key_variable_or_file_is_one_line_naming_it(flags: list[str], message: str,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UT_SURELY_UNSET", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    code, err = error_of([*PROBE, *flags], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert message in err and "sk_lower_case_unset_1234" not in err and KEY not in err


def test_a_key_file_loses_one_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(KEY.encode() + b"\n")  # as `kubectl create secret --from-file` of `echo KEY > f` leaves it
    assert read_key_file(str(path)) == KEY
    path.write_bytes(KEY.encode())
    assert read_key_file(str(path)) == KEY
    path.write_bytes(b"")
    assert read_key_file(str(path)) is None
    path.write_bytes(KEY.encode() + b"\n\n")  # a second newline is inside the key: refused, never shown
    with pytest.raises(UserError, match="control character") as info:
        read_key_file(str(path))
    assert KEY not in str(info.value)
    with pytest.raises(UserError, match=rf"--api-key-file {tmp_path}: is a directory"):
        read_key_file(str(tmp_path))


async def test_the_key_from_a_file_is_sent_and_a_refusal_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    with respx.mock(using="httpx", base_url="http://k.test/v1") as mock:
        route = mock.get("/models").mock(return_value=httpx.Response(401, text=f"bad key {KEY}"))
        async with Endpoint(EndpointConfig(base_url="http://k.test/v1", api_key_file=str(path))) as endpoint:
            with pytest.raises(EndpointError) as info:
                await endpoint.check()
    assert route.calls[0].request.headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in str(info.value)
    assert str(info.value).endswith(f"(key from key file {path})")


async def test_a_401_without_a_key_says_none_was_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with respx.mock(using="httpx", base_url="http://k.test/v1") as mock:
        route = mock.get("/models").mock(return_value=httpx.Response(401, text="missing bearer"))
        async with Endpoint(EndpointConfig(base_url="http://k.test/v1")) as endpoint:
            with pytest.raises(EndpointError) as info:
                await endpoint.check()
    assert "authorization" not in route.calls[0].request.headers
    message = str(info.value)
    assert "requires an API key (HTTP 401)" in message and "refused" not in message
    assert "no key sent: $OPENAI_API_KEY is empty or not set" in message


def test_judge_keys_per_judge_from_files_and_variables(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args([*JUDGE, "--judge-model", "k", "--judge-api-key-file", "a", "--judge-api-key-file", "b"])
    config = panel_config(args)
    assert config is not None
    assert [(j.api_key_file, j.api_key_env) for j in config.judges] == [("a", "OPENAI_API_KEY"),
                                                                        ("b", "OPENAI_API_KEY")]
    args = parser.parse_args([*JUDGE, "--judge-api-key-env", "UT_JUDGE"])
    config = panel_config(args)
    assert config is not None and [(j.api_key_file, j.api_key_env) for j in config.judges] == [(None, "UT_JUDGE")]


def test_one_spelling_of_judge_concurrency_and_retries_on_every_command() -> None:
    """`--judge-concurrency` and `--judge-max-retries` on probe, judge and judge-eval; judge and judge-eval also take
    `--concurrency` for the first (no other endpoint to confuse it with)."""
    parser = build_parser()
    for argv in (PROBE, JUDGE, ["judge-eval", "gold.jsonl", "--judge-model", "j", "--judge-base-url", "http://x/v1"]):
        args = parser.parse_args([*argv, "--judge-concurrency", "3", "--judge-max-retries", "2"])
        assert (args.judge_concurrency, args.judge_max_retries) == (3, 2), argv[0]
    assert parser.parse_args([*JUDGE, "--concurrency", "5"]).judge_concurrency == 5
    probe = parser.parse_args([*PROBE, "--concurrency", "5"])
    assert probe.concurrency == 5 and probe.judge_concurrency != 5  # the probe's own endpoint


def test_an_experiment_takes_key_files_and_refuses_a_key_as_a_variable_name(tmp_path: Path) -> None:
    from userturn.core.options import ProbeOptions
    from userturn.orchestrate.experiment import Experiment, judge_panel, load_experiment, target_source

    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    entry = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    exp = Experiment.model_validate({
        "name": "k", "datasets": ["d.jsonl"], "models": [{**entry, "api_key_file": str(key_file)}],
        "judges": [{"model": "j", "base_url": "http://127.0.0.1:9/v1", "api_key_file": str(key_file)}]})
    assert target_source(exp.models[0], exp, tmp_path).api_key_file == str(key_file)
    panel = judge_panel(exp, "m", "http://127.0.0.1:9/v1", ProbeOptions())
    assert [j.config.api_key_file for j in panel.judges] == [str(key_file)]
    for where in ({"models": [{**entry, "api_key_env": KEY}]},
                  {"models": [entry], "judges": [{"model": "j", "base_url": "http://x/v1", "api_key_env": KEY}]}):
        path = tmp_path / "exp.yaml"
        path.write_text(json.dumps({"name": "k", "datasets": ["d.jsonl"], **where}))  # JSON is YAML
        with pytest.raises(UserError, match=r"api_key_env: .*not the name of an environment variable") as info:
            load_experiment(path)
        assert KEY not in str(info.value)
