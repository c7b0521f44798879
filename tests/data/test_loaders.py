"""Built-in loaders: hub-shaped fixture rows -> DatasetItems; spec parsing, shuffle/limit, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from userturn.client.data.loaders import BUILTINS, hub, load_dataset_spec, mt_bench_offline
from userturn.client.data.loaders.reference_number import reference_number
from userturn.core.errors import UserError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "datasets"
FILES = {"openai/gsm8k": "gsm8k", "google/IFEval": "ifeval", "HuggingFaceH4/mt_bench_prompts": "mt_bench",
         "openai/healthbench": "healthbench", "openai/coval": "coval"}


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Replace the one hub function with the fixture files; record what was asked for."""
    calls: list[tuple] = []

    def fetch_rows(repo, config, split, *, data_files=None):
        calls.append((repo, config, split, data_files))
        lines = (FIXTURES / f"{FILES[repo]}.jsonl").read_text().splitlines()
        return (json.loads(line) for line in lines if line.strip())

    monkeypatch.setattr(hub, "fetch_rows", fetch_rows)
    return calls


def test_gsm8k_maps_question_solution_and_numeric_answer(fake_hub):
    name, items = load_dataset_spec("gsm8k", limit=None, shuffle_seed=None)
    assert name == "gsm8k"
    assert fake_hub == [("openai/gsm8k", "main", "test", None)]
    first = items[0]
    assert first.id == "test-00000"
    assert first.answer == "72"
    assert [m.role for m in first.messages] == ["user", "assistant"]
    assert "<<" not in first.messages[1].content
    assert first.messages[1].content.endswith("in April and May.\nThe answer is 72.")
    assert items[1].answer == "2000"  # thousands separator removed
    assert first.meta == {"scorer": "gsm8k"}


def test_gsm8k_train_split_display_name_and_ids(fake_hub):
    name, items = load_dataset_spec("gsm8k:train", limit=1, shuffle_seed=None)
    assert name == "gsm8k:train"
    assert fake_hub[0][2] == "train"
    assert [i.id for i in items] == ["train-00000"]


def test_ifeval_keeps_instructions_and_drops_null_kwargs(fake_hub):
    _, items = load_dataset_spec("ifeval", limit=None, shuffle_seed=None)
    item = items[0]
    assert item.id == "1000"
    assert [m.role for m in item.messages] == ["user"]
    assert item.meta["instruction_id_list"][1] == "detectable_format:number_highlighted_sections"
    assert item.meta["kwargs"] == [{}, {"num_highlights": 3}, {"relation": "at least", "num_words": 300}]
    assert item.meta["scorer"] == "ifeval"


def test_mt_bench_first_turn_with_second_turn_and_reference_in_meta(fake_hub):
    _, items = load_dataset_spec("mt-bench", limit=None, shuffle_seed=None)
    assert [i.id for i in items] == ["81", "111"]
    assert items[0].messages[0].content.startswith("Compose an engaging travel blog")
    assert len(items[0].messages) == 1
    assert items[0].meta == {"category": "writing", "second_turn": items[0].meta["second_turn"]}
    assert items[1].meta["reference"] == "Area is 3"
    assert (items[0].answer, items[1].answer) == (None, "3")  # a math reference's numeric final answer is the gold
    assert items[1].meta["scorer"] == "numeric" and "scorer" not in items[0].meta


@pytest.mark.parametrize(("reference", "number"), [  # FastChat's math references, and what must not count
    ("Area is 3", "3"), ("12000", "12000"), ("19%", "19"), ("38 people", "38"), ("19 integers (-14, ..., 4)", "19"),
    ("0\n\nVery simple. just (x+y)^2 - 4xy = 0", "0"), ("f(2) = 0", "0"), ("1,000 dollars", "1000"),
    ("36 (all cases) - 0 (sum equals 1) - 1 (sum equals 2) = 35, so the probability is 35/36", None),
    ("x = 2/3", None), ("(-1/2)y", None), ("Very simple: 3", None), ("", None),
])
def test_mt_bench_reference_number(reference: str, number: str | None):
    assert reference_number(reference) == number


def test_mt_bench_numeric_gold_only_for_math():
    assert mt_bench_offline.numeric_answer({"category": "math", "reference": "12000"}) == "12000"
    assert mt_bench_offline.numeric_answer({"category": "reasoning", "reference": "12000"}) is None
    assert mt_bench_offline.numeric_answer({"category": "math"}) is None


@pytest.mark.parametrize(("item_id", "meta", "gold"), [
    ("120", {"category": "math", "reference": "f(2) = 0"}, ("0", "numeric")),
    ("114", {"category": "math", "reference": "... so the probability is 35/36"}, ("35/36", "numeric")),
    ("104", {"category": "reasoning", "reference": "David has no brother. He is the one brother of his three sisters."},
     ("David has no brother.", "exact")),
    ("101", {"category": "reasoning", "reference": "You are in second place."}, (None, None)),
    ("130", {"category": "coding", "reference": "def f(): ..."}, (None, None)),
])
def test_mt_bench_gold_answers_and_their_scorers(item_id: str, meta: dict, gold: tuple):
    answer, with_scorer = mt_bench_offline.gold_answer(item_id, meta)
    assert (answer, with_scorer.get("scorer")) == gold
    assert {k: v for k, v in with_scorer.items() if k != "scorer"} == meta


def test_healthbench_conversations_end_with_user_and_ideal_split(fake_hub):
    _, items = load_dataset_spec("healthbench", limit=None, shuffle_seed=None)
    assert fake_hub[0] == ("openai/healthbench", None, "train", "2025-05-07-06-14-12_oss_eval.jsonl")
    assert [len(i.messages) for i in items] == [3, 1]
    assert all(i.messages[-1].role == "user" for i in items)
    assert items[0].meta == {"example_tags": ["theme:context_seeking"], "rubric_count": 1}
    name, ideal = load_dataset_spec("healthbench:ideal", limit=None, shuffle_seed=None)
    assert name == "healthbench:ideal"
    assert [i.id for i in ideal] == ["1f548d5b-cd00-49a0-b327-283a2e00debd"]  # the row without one is left out
    assert ideal[0].messages[-1].role == "assistant"
    assert ideal[0].messages[-1].content.startswith("Low fluid intake")


def test_healthbench_hard_uses_its_file(fake_hub):
    load_dataset_spec("healthbench:hard", limit=None, shuffle_seed=None)
    assert fake_hub[0][3] == "hard_2025-05-08-21-00-10.jsonl"


def test_coval_takes_best_world_ranked_candidate(fake_hub):
    _, items = load_dataset_spec("coval", limit=None, shuffle_seed=None)
    item = items[0]
    assert fake_hub[0][:3] == ("openai/coval", "comparisons", "train")
    assert [m.role for m in item.messages] == ["developer", "user", "assistant"]
    assert item.messages[-1].content.startswith("Share honest, kind feedback")  # B: mean world rank 0
    assert item.meta["candidate"] == "B"
    assert item.meta["world_mean_rank"] == {"A": 0.5, "B": 0.0, "C": 1.5}


def test_shuffle_is_deterministic_and_applied_before_limit(fake_hub):
    _, a = load_dataset_spec("mt-bench", limit=None, shuffle_seed=3)
    _, b = load_dataset_spec("mt-bench", limit=None, shuffle_seed=3)
    assert [i.id for i in a] == [i.id for i in b]
    seeds = {tuple(i.id for i in load_dataset_spec("mt-bench", limit=None, shuffle_seed=s)[1]) for s in range(8)}
    assert seeds == {("81", "111"), ("111", "81")}
    _, one = load_dataset_spec("mt-bench", limit=1, shuffle_seed=3)
    assert one[0].id == a[0].id


def test_local_jsonl_path(tmp_path: Path):
    path = tmp_path / "mine.jsonl"
    rows = [{"id": f"x{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(5)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    name, items = load_dataset_spec(str(path), limit=2, shuffle_seed=None)
    assert name == "mine" and [i.id for i in items] == ["x0", "x1"]
    _, shuffled = load_dataset_spec(str(path), limit=2, shuffle_seed=1)
    assert len(shuffled) == 2 and {i.id for i in shuffled} <= {r["id"] for r in rows}


def test_unknown_name_and_split_are_one_line_errors(fake_hub):
    with pytest.raises(UserError, match=r"unknown dataset 'nope'.*gsm8k, ifeval, mt-bench, healthbench, coval"):
        load_dataset_spec("nope", limit=None, shuffle_seed=None)
    with pytest.raises(UserError, match=r"has no split 'dev' \(choose from test, train\)"):
        load_dataset_spec("gsm8k:dev", limit=None, shuffle_seed=None)


def test_malformed_hub_row_names_dataset_and_row(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(hub, "fetch_rows", lambda *a, **k: iter([{"question": "q", "answer": "no final line"}]))
    with pytest.raises(UserError, match=r"gsm8k \(openai/gsm8k\) row 0: answer has no '#### N' final line"):
        load_dataset_spec("gsm8k", limit=None, shuffle_seed=None)
    monkeypatch.setattr(hub, "fetch_rows", lambda *a, **k: iter([{"prompt": "p"}]))
    with pytest.raises(UserError, match=r"row 0: missing field 'instruction_id_list'"):
        load_dataset_spec("ifeval", limit=None, shuffle_seed=None)


def test_unreachable_hub_is_one_user_error(monkeypatch: pytest.MonkeyPatch):
    import datasets

    def boom(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", boom)
    with pytest.raises(UserError) as info:
        list(hub.fetch_rows("openai/gsm8k", "main", "test"))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("could not load openai/gsm8k (main) split 'test' from the Hugging Face hub: Couldn't")


def test_every_builtin_has_a_default_split_it_defines():
    for dataset in BUILTINS.values():
        assert dataset.default_split in dataset.splits
