"""`userturn label` without a browser: the stratified sample (allocation computed by hand), each labeller's order,
answers appended and resumed, the page's blind view of a record, the server's token and headers, bad inputs."""

from __future__ import annotations

import asyncio
import random
import socket
from collections import Counter
from pathlib import Path

import httpx
import pytest

from userturn.cli import main
from userturn.core.errors import UserError
from userturn.core.records import Message, ProbeRecord, record_key
from userturn.judges.gold import read_gold, read_gold_lines
from userturn.judges.label_server import LabelServer
from userturn.judges.label_session import (
    Answer,
    LabelSession,
    allocate,
    draw_sample,
    labeller_order,
    stratum,
)


def record(item: int, *, model: str = "m", perturbation: str = "none", temperature: float = 1.0,
           label: str | None = None, status: str = "ok", user_turn: str | None = "and then?") -> ProbeRecord:
    return ProbeRecord.model_validate({
        "key": record_key(model, "d", str(item), perturbation, temperature, 0), "status": status, "model": model,
        "dataset": "d", "item_id": str(item), "perturbation": perturbation, "temperature": temperature,
        "sample": 0, "seed": 1, "label": label, "user_turn": user_turn,
        "messages": [Message(role="user", content=f"question {item}"),
                     Message(role="assistant", content=f"answer {item}")]})


def write(path: Path, records: list[ProbeRecord]) -> Path:
    path.write_text("".join(r.model_dump_json() + "\n" for r in records))
    return path


def test_allocation_by_largest_remainder_computed_by_hand() -> None:
    # strata of 10, 6 and 4 records (20), n = 7: shares 3.5, 2.1, 1.4 -> floors 3, 2, 1 (6); the one left goes to
    # the largest remainder (0.5, the first stratum): 4, 2, 1
    assert allocate({"a": 10, "b": 6, "c": 4}, 7, random.Random(0)) == {"a": 4, "b": 2, "c": 1}
    # n = 10 of the same: exactly proportional, 5, 3, 2; n at or above the total: every record
    assert allocate({"a": 10, "b": 6, "c": 4}, 10, random.Random(0)) == {"a": 5, "b": 3, "c": 2}
    assert allocate({"a": 10, "b": 6, "c": 4}, 25, random.Random(0)) == {"a": 10, "b": 6, "c": 4}
    # a tie (two remainders of 0.5, one draw left) goes to one of the two, by the seed, never to both
    tied = [allocate({"a": 1, "b": 1, "c": 2}, 2, random.Random(seed)) for seed in range(20)]
    assert all(t["c"] == 1 and t["a"] + t["b"] == 1 for t in tied)
    assert {t["a"] for t in tied} == {0, 1}


def test_sample_is_stratified_over_model_temperature_perturbation_and_label() -> None:
    # 20 records in three strata (10 m/none/T1 judged generic, 6 m/none/T1 unjudged, 4 x/swap/T0 genuine), plus
    # records that cannot be labelled: an error, a record without a user turn
    records = ([record(i, label="generic") for i in range(10)] + [record(i) for i in range(10, 16)]
               + [record(i, model="x", perturbation="swap", temperature=0.0, label="genuine_followup")
                  for i in range(4)]
               + [record(99, status="error", user_turn=None), record(98, label="generic", user_turn=None)])
    sample = draw_sample(records, 7, seed=3)
    assert Counter(stratum(r) for r in sample) == {("m", "d", "raw", "none", 1.0, "generic"): 4,
                                                   ("m", "d", "raw", "none", 1.0, ""): 2,
                                                   ("x", "d", "raw", "swap", 0.0, "genuine_followup"): 1}
    assert [r.key for r in sample] == [r.key for r in draw_sample(reversed(records), 7, seed=3)]  # seeded
    assert {r.key for r in sample} != {r.key for r in draw_sample(records, 7, seed=4)}
    assert len(draw_sample(records, 200, seed=3)) == 20  # every labellable record, never the other two


def test_labellers_get_the_same_records_in_orders_of_their_own() -> None:
    sample = draw_sample([record(i) for i in range(30)], 30, seed=0)
    ann, bob = labeller_order(sample, 0, "ann"), labeller_order(sample, 0, "bob")
    assert sorted(r.key for r in ann) == sorted(r.key for r in bob) == [r.key for r in sample]
    assert [r.key for r in ann] != [r.key for r in bob]
    assert [r.key for r in ann] == [r.key for r in labeller_order(sample, 0, "ann")]


def test_answers_are_appended_and_a_new_session_resumes_at_the_first_open_record(tmp_path: Path) -> None:
    out = tmp_path / "gold.jsonl"
    records = [record(i, model="secret-model", perturbation="wrong_answer", label="generic") for i in range(4)]
    session = LabelSession(records, out, "ann")
    assert session.state()["start"] == 0
    session.answer(Answer(index=0, label="genuine_followup", note="  asks about step 2 "))
    session.answer(Answer(index=1, skipped=True))
    session.answer(Answer(index=2, label="generic"))
    session.answer(Answer(index=2, label=None))  # taken back
    lines = read_gold_lines(out)
    assert [(line.key, line.label, line.skipped) for line in lines] == [
        (records[0].key, "genuine_followup", False), (records[1].key, None, True), (records[2].key, "generic", False),
        (records[2].key, None, False)]
    assert lines[0].note == "asks about step 2" and lines[0].labeller == "ann"
    assert lines[0].user_turn == "and then?" and lines[0].messages == records[0].messages and lines[0].at
    assert {k: v.label for (k, _), v in read_gold([out]).items()} == {records[0].key: "genuine_followup"}
    again = LabelSession(records, out, "ann")  # a rerun: 0 labelled, 1 skipped, 2 taken back -> starts at 2
    assert again.state() | {"labels": None} == {"n": 4, "answered": 2, "open": [2, 3], "start": 2,
                                                 "labeller": "ann", "labels": None}
    assert LabelSession(records, out, "bob").state()["start"] == 0  # another labeller's answers are not hers
    with pytest.raises(UserError, match="unknown label"):
        again.answer(Answer(index=3, label="great"))
    with pytest.raises(UserError, match="no record 4"):
        again.answer(Answer(index=4, label="generic"))


def test_the_page_sees_nothing_that_names_the_condition_or_the_verdict(tmp_path: Path) -> None:
    rec = record(5, model="secret-model", perturbation="wrong_answer", temperature=0.7, label="related_new_query")
    view = LabelSession([rec], tmp_path / "g.jsonl", "ann").item(0)
    assert set(view) == {"index", "n", "user_turn", "answer", "messages"}
    text = str(view)
    for secret in ("secret-model", "wrong_answer", "0.7", "related_new_query", rec.key):
        assert secret not in text


def test_server_refuses_requests_without_the_token_and_sends_a_strict_csp(tmp_path: Path) -> None:
    session = LabelSession([record(1)], tmp_path / "g.jsonl", "ann")

    async def scenario() -> None:
        server = LabelServer(session)
        await server.start()
        try:
            base = f"http://127.0.0.1:{server.port}"
            async with httpx.AsyncClient() as client:
                for path in ("/", "/api/state", f"/{server.token[:-1]}/api/state", "/x/api/state"):
                    assert (await client.get(base + path)).status_code == 403, path
                wrong_host = await client.get(server.url + "api/state", headers={"Host": "evil.example:80"})
                assert wrong_host.status_code == 403
                page = await client.get(server.url)
                assert page.status_code == 200 and "label_page.js" in page.text
                assert "script-src 'self'" in page.headers["content-security-policy"]
                assert "unsafe-inline" not in page.headers["content-security-policy"]
                assert page.headers["referrer-policy"] == "no-referrer"
                bad = await client.post(server.url + "api/answer", json={"index": 0, "label": "nope"})
                assert bad.status_code == 400 and "unknown label" in bad.json()["error"]
                good = await client.post(server.url + "api/answer", json={"index": 0, "label": "generic"})
                assert good.json()["answered"] == 1
        finally:
            await server.stop()

    asyncio.run(scenario())
    assert read_gold_lines(tmp_path / "g.jsonl")[0].label == "generic"


def run_label(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["label", *argv, "--no-browser"])
    return status, capsys.readouterr().err.strip()


def test_bad_inputs_are_one_line_and_a_non_zero_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "gold.jsonl")
    status, err = run_label(capsys, str(tmp_path / "missing.jsonl"), "--out", out)
    assert status == 2 and err == f"userturn: error: results file not found: {tmp_path / 'missing.jsonl'}"
    unlabellable = write(tmp_path / "errors.jsonl", [record(1, status="error", user_turn=None)])
    status, err = run_label(capsys, str(unlabellable), "--out", out)
    assert status == 2 and err == f"userturn: error: {unlabellable}: no ok record with a user turn to label"
    good = write(tmp_path / "r.jsonl", [record(1)])
    (tmp_path / "file").write_text("")
    status, err = run_label(capsys, str(good), "--out", str(tmp_path / "file" / "gold.jsonl"))
    assert status == 2 and "is a file, not a directory" in err and "\n" not in err
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text('{"key": "k", "label": "generic", "labeller": "ann"}\n{"key": "k", "label": "great"}\n')
    status, err = run_label(capsys, str(good), "--out", str(damaged))
    assert status == 2 and err.startswith(f"userturn: error: {damaged}:2: not a gold label line")
    status, err = run_label(capsys, str(good), "--out", out, "--port", "70000")
    assert status == 2 and err == "userturn: error: --port 70000: a port is at most 65535"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, err = run_label(capsys, str(good), "--out", out, "--port", str(port))
    assert status == 2 and err.startswith(f"userturn: error: --port {port}: cannot listen on 127.0.0.1:{port}")
    assert "\n" not in err
