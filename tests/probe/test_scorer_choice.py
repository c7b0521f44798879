"""Task accuracy on a user's own data: `--scorer` / `scorer:` choose a scorer of the registry for items whose meta
names none; items with an `answer` that no scorer reads get a one-line notice; end to end on a 127.0.0.1 server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mock_http import MockServer, completion_handler
from results_lines import record_lines

from userturn.cli import main
from userturn.core.errors import UserError

# question -> what the model under test answers; the gold `answer` of each item, and whether the reply is right
ITEMS = [
    ("q1", "What is 2 + 3?", "The answer is 5.", "5", True),
    ("q2", "What is 10 + 7?", "10 + 7 = 17", "17", True),
    ("q3", "What is 4 + 4?", "The answer is 9.", "8", False),
    ("q4", "What is 1,000 + 250?", "**Answer:** 1,250", "1250", True),
    ("q5", "What share of 4 slices is 3 slices?", "That is 3/4 of the pizza.", "3/4", True),
    ("q6", "What is 9 - 3?", "I am not sure.", "6", False),
]


def reply(body: dict[str, Any]) -> str:
    """The assistant's answer to a question; any other conversation (the role-flipped probe) gets a follow-up."""
    last = body["messages"][-1]["content"]
    return next((answer for _, question, answer, _, _ in ITEMS if question == last), "Can you show the steps?")


def write_items(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": item_id, "answer": gold, "messages": [
        {"role": "user", "content": question}]}) + "\n" for item_id, question, _, gold, _ in ITEMS))
    return path


def probe(server: MockServer, data: Path, out: Path, *extra: str) -> int:
    return main(["probe", "--base-url", server.base_url, "--model", "mock", "--mode", "chat", "--dataset", str(data),
                 "--out", str(out), "--temperature", "0", "--no-progress", *extra])


def report_rows(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["report", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_scorer_numeric_gives_accuracy_on_a_users_own_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data = write_items(tmp_path / "mine.jsonl")
    with MockServer(completion_handler(reply)) as server:
        assert probe(server, data, tmp_path / "plain.jsonl", "--assistant-from", "model") == 0
        plain_err = capsys.readouterr().err
        assert probe(server, data, tmp_path / "scored.jsonl", "--assistant-from", "model", "--scorer", "numeric") == 0
        scored_err = capsys.readouterr().err
    # without a scorer: no accuracy, and one line says why and what chooses one
    notices = [line for line in plain_err.splitlines() if "carry an `answer`" in line]
    assert notices == ["userturn: mine: 6 of 6 items carry an `answer` (first: item 'q1') but no scorer applies, so "
                       "they get no task accuracy; choose one with --scorer (numeric, exact)"]
    assert {r["correct"] for r in record_lines(tmp_path / "plain.jsonl")} == {None}
    assert [row["accuracy"] for row in report_rows(tmp_path / "plain.jsonl", capsys)] == [None]
    # with --scorer numeric: each model answer against its gold, 4 of 6 right (q3 says 9 for 8, q6 no number)
    assert "carry an `answer`" not in scored_err
    records = {r["item_id"]: r for r in record_lines(tmp_path / "scored.jsonl")}
    assert {i: r["correct"] for i, r in records.items()} == {i: right for i, _, _, _, right in ITEMS}
    assert records["q5"]["reference_answer"] == "3/4" and records["q5"]["meta"]["assistant_turn"] == ITEMS[4][2]
    [row] = report_rows(tmp_path / "scored.jsonl", capsys)
    assert (row["accuracy"], row["accuracy_n"]) == (pytest.approx(4 / 6), 6)


def test_an_answer_the_numeric_scorer_cannot_read_is_refused_before_any_request(tmp_path: Path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text('{"id": "a", "answer": "4", "messages": [{"role": "user", "content": "2+2?"}]}\n'
                    '{"id": "b", "answer": "four", "messages": [{"role": "user", "content": "2+2?"}]}\n')
    with MockServer(completion_handler()) as server:
        assert probe(server, data, tmp_path / "o.jsonl", "--assistant-from", "model", "--scorer", "numeric") == 2
        assert server.bodies("/chat/completions") == []
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"userturn: error: {data}:2: item b: answer 'four' is not a number, and the numeric scorer "
                     "compares numbers (give the number, or choose another scorer)"]
    assert not (tmp_path / "o.jsonl").exists()


def test_scorer_flag_choices_and_help_come_from_the_registry(capsys: pytest.CaptureFixture[str]):
    from userturn.client.probe.scoring import SCORERS

    with pytest.raises(SystemExit) as info:
        main(["probe", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dataset", "d.jsonl", "--out", "o",
              "--scorer", "bleu"])
    assert info.value.code == 2
    assert f"invalid choice: 'bleu' (choose from {', '.join(map(repr, SCORERS))})" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name, scorer in SCORERS.items():
        assert f"{name}: {' '.join(scorer.checks.split())}" in help_text


def experiment(tmp_path: Path, server: MockServer, extra: str) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(f"name: e\nmodels:\n  - base_url: {server.base_url}\n    model: mock\ndatasets: [mine.jsonl]\n"
                    f"modes: [chat]\nassistant_from: model\ntemperatures: [0]\nout_dir: {tmp_path / 'runs'}\n"
                    + extra)
    return path


def test_the_experiment_key_scores_a_run_and_an_unknown_name_is_refused(tmp_path: Path, capsys):
    write_items(tmp_path / "mine.jsonl")
    with MockServer(completion_handler(reply)) as server:
        assert main(["run", str(experiment(tmp_path, server, "scorer: bleu\n"))]) == 2
        err = capsys.readouterr().err
        assert re.search(r"e\.yaml: scorer: Value error, unknown scorer 'bleu' \(choose from numeric, exact", err)
        assert main(["run", str(experiment(tmp_path, server, "")), "--dry-run"]) == 0
        assert [line for line in capsys.readouterr().err.splitlines() if "carry an `answer`" in line] == [
            "userturn: mine: 6 of 6 items carry an `answer` (first: item 'q1') but no scorer applies, so they get no "
            "task accuracy; choose one with `scorer:` in the experiment file (numeric, exact)"]
        assert main(["run", str(experiment(tmp_path, server, "scorer: numeric\n")), "--no-progress"]) == 0
        assert "carry an `answer`" not in capsys.readouterr().err
    records = record_lines(tmp_path / "runs" / "e" / "results.jsonl")
    assert sorted(r["item_id"] for r in records if r["correct"]) == ["q1", "q2", "q4", "q5"]


@pytest.mark.parametrize(("response", "gold", "correct"), [
    ("the probability is 35/36.", "35/36", True),
    ("The answer is 70/72", "35/36", True),  # numerator read after the answer phrase: the same value
    ("Probability = 34/36 = 17/18 ≈ 0.944, or 94.4%.", "35/36", False),
    ("It is 0.75", "3/4", True),
    ("So f(2) = 0.", "0", True),
    ("He moved on 1/2/3 then 4", "4", True),
])
def test_numeric_reads_fractions_where_the_final_number_is_one(response: str, gold: str, correct: bool):
    from userturn.client.data.dataset import DatasetItem
    from userturn.client.probe.scoring import score

    item = DatasetItem(id="x", messages=[{"role": "user", "content": "q"}], answer=gold)
    assert score("mine", item, response, "numeric")[0] is correct


@pytest.mark.parametrize(("response", "correct"), [
    ("A is the grandfather of C.", True),
    ("**a is  the Grandfather of c**", True),
    ("A is the great-grandfather of C.", False),
    ("A is the grandfather of C. B is the father.", False),
])
def test_exact_compares_the_whole_normalised_response(response: str, correct: bool):
    from userturn.client.data.dataset import DatasetItem
    from userturn.client.probe.scoring import score

    item = DatasetItem(id="x", messages=[{"role": "user", "content": "q"}], answer="A is the grandfather of C")
    assert score("mine", item, response, "exact") == (correct, {"exact_match": float(correct)})


def test_meta_scorer_wins_over_the_chosen_one_which_wins_over_the_dataset_name():
    from userturn.client.data.dataset import DatasetItem
    from userturn.client.probe.scoring import scorer_name

    plain = DatasetItem(id="x", messages=[{"role": "user", "content": "q"}], answer="7")
    named = plain.model_copy(update={"meta": {"scorer": "exact"}})
    assert scorer_name("gsm8k", plain) == "gsm8k"
    assert scorer_name("gsm8k", plain, "exact") == "exact"
    assert scorer_name("mine", named, "numeric") == "exact"
    assert scorer_name("mine", plain) is None


def test_the_notice_counts_a_file_kept_on_disk_without_parsing_it(tmp_path: Path):
    from userturn.client.data.lazy_dataset import load_jsonl_lazy
    from userturn.client.probe.scoring import unscored_answers

    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "1", "messages": [{"role": "user", "content": "q"}]}\n'
                    '{"id": "2", "answer": 3, "messages": [{"role": "user", "content": "q"}], '
                    '"meta": {"scorer": "numeric"}}\n'
                    '{"id": "3", "answer": "x", "messages": [{"role": "user", "content": "q"}]}\n'
                    '{"id": "4", "answer": 5, "messages": [{"role": "user", "content": "q"}]}\n')
    items = load_jsonl_lazy(path)
    assert unscored_answers("d", items) == (2, "3")
    assert unscored_answers("d", items[::-1]) == (2, "4")
    assert unscored_answers("d", list(items)) == (2, "3")
    assert unscored_answers("d", items, "exact") is None
    assert unscored_answers("gsm8k", items) is None  # the dataset's name chooses one


def test_an_unknown_chosen_scorer_is_refused_by_preflight():
    from userturn.client.probe.scoring import preflight

    with pytest.raises(UserError, match=r"--scorer: unknown scorer 'bleu' \(choose from numeric, exact, ifeval"):
        preflight("mine", [], "bleu")
