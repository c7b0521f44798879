"""`userturn posttrain`: the split, the base-vs-trained comparison, the experiment file, and the whole loop on the
tiny model (probe base -> judge -> export -> train -> probe trained on held-out items -> report; then resume)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from results_lines import record_lines

from userturn.client.data.dataset import DatasetItem
from userturn.core.errors import UserError
from userturn.core.records import ProbeRecord, record_key
from userturn.orchestrate.posttrain import compare, load_posttrain, split_items
from userturn.report.stats import ItemTallies, paired_difference


def _item(i: int) -> DatasetItem:
    return DatasetItem(id=str(100 + i), messages=[{"role": "user", "content": f"what is {i} plus {i}"},
                                                  {"role": "assistant", "content": f"it is {2 * i}"}],
                       meta={"second_turn": f"and {i} times {i}?"})


def test_split_is_seeded_by_id_disjoint_and_order_free():
    items = [_item(i) for i in range(10)]
    train, held = split_items(items, 3, seed=0)
    assert len(held) == 3 and len(train) == 7 and not {i.id for i in train} & {i.id for i in held}
    _, held_r = split_items(list(reversed(items)), 3, seed=0)
    assert {i.id for i in held_r} == {i.id for i in held}
    assert {i.id for i in split_items(items, 3, seed=1)[1]} != {i.id for i in held}  # another seed, another split
    with pytest.raises(UserError, match="must leave training items"):
        split_items(items, 10, seed=0)


def _rec(model: str, item: str, sample: int, *, label: str | None, source: str | None = None,
         finish: str = "stop") -> ProbeRecord:
    return ProbeRecord(key=record_key(model, "d", item, "none", 1.0, sample), model=model, dataset="d", item_id=item,
                       temperature=1.0, sample=sample, seed=0, status="ok", user_turn="x", finish_reason=finish,
                       label=label, label_source=source)


def test_compare_pairs_items_and_uses_the_clustered_paired_interval():
    base = [_rec("b", str(i), s, label="restates_query" if s == 0 else None, source="rule" if s == 0 else None,
                 finish="length" if s else "stop") for i in range(6) for s in range(2)]
    trained = [_rec("t", str(i), s, label=None, finish="stop") for i in range(6) for s in range(2)]
    rows = {m.metric: m for m in compare(base, trained, [1.0])}
    flagged = rows["rule_flagged"]
    assert (flagged.base_rate, flagged.trained_rate, flagged.items) == (0.5, 0.0, 6)
    expected = paired_difference(ItemTallies.from_mapping({str(i): (0, 2) for i in range(6)}),
                                 ItemTallies.from_mapping({str(i): (1, 2) for i in range(6)}))
    assert (flagged.delta, flagged.ci_low, flagged.ci_high) == (expected.delta, expected.ci_low, expected.ci_high)
    assert flagged.delta == -0.5 and flagged.ci_low < -0.5 < flagged.ci_high < 0
    ended = rows["ended_turn"]
    assert (ended.base_rate, ended.trained_rate, ended.delta) == (0.5, 1.0, 0.5)
    genuine = rows["genuine_followup"]  # only rule labels: the paper's metric is not measured, and says so
    assert genuine.trained_rate is None and genuine.delta is None and "rules only" in (genuine.note or "")


@pytest.mark.parametrize(("change", "message"), [
    ({"held_outt": 3}, r"held_outt: unknown key"),
    ({"train": {"method": "dpo"}}, r"train.method dpo trains on preference rows"),
    ({"train": {"method": "sft", "lora_r": 0}}, r"train.lora_r: Input should be greater than or equal to 1"),
])
def test_bad_experiment_files_name_the_file_and_key(tmp_path: Path, change: dict, message: str):
    data = {"name": "p", "base": "m.yaml", "dataset": "d.jsonl", "held_out": 2, "train": {"method": "sft"}, **change}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match=f"^{path}: {message}"):
        load_posttrain(path)


def test_the_shipped_experiment_file_is_valid_and_resolves_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    exp, path = load_posttrain("posttrain")
    assert path.name == "posttrain.yaml" and path.is_file()
    assert exp.train.method == "sft" and exp.train_data == ["sft-human"] and exp.held_out == 12


@pytest.mark.slow
def test_posttrain_runs_end_to_end_on_the_tiny_model_and_resumes(tmp_path: Path, tiny_model_dir: Path,
                                                                  capsys: pytest.CaptureFixture[str]):
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    from userturn.cli import main

    (tmp_path / "items.jsonl").write_text("".join(json.dumps(_item(i).model_dump(exclude_none=True)) + "\n"
                                                  for i in range(6)))
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({
        "name": "tiny", "engine": "transformers", "model": str(tiny_model_dir), "served_model_name": "tiny",
        "seed": 0, "extra_args": ["--threads", "1"], "probe": {"tokenizer": str(tiny_model_dir)}}))
    (tmp_path / "post.yaml").write_text(yaml.safe_dump({
        "name": "loop", "base": "tiny.yaml", "dataset": "items.jsonl", "held_out": 2, "samples": 2,
        "max_tokens": 4, "train": {"method": "sft", "max_steps": 2, "learning_rate": 0.01}, "out_dir": "unused"}))
    argv = ["posttrain", str(tmp_path / "post.yaml"), "--out-dir", str(tmp_path / "runs"), "--no-progress"]
    assert main(argv) == 0
    run = tmp_path / "runs" / "loop"
    split = json.loads((run / "split.json").read_text())
    rows = [json.loads(line) for line in (run / "train.jsonl").read_text().splitlines()]
    assert len(split["held_out"]) == 2 and {r["id"] for r in rows} == set(split["train"])
    assert rows[0]["messages"][-1]["content"].endswith("?")  # the human second turn is the target
    training = json.loads((run / "model" / "training.json").read_text())
    assert training["result"]["steps"] == 2 and training["eval_sets"][0]["items"] == 2
    trained = record_lines(run / "trained-held-out" / "results.jsonl")
    assert len(trained) == 4 and {r["item_id"] for r in trained} == set(split["held_out"])
    assert all(r["meta"]["trained"]["tag"] == training["tag"] and r["model"] == training["model_name"]
               for r in trained)
    report = json.loads((run / "report.json").read_text())
    assert {m["metric"] for m in report["metrics"]} == {"genuine_followup", "rule_flagged", "ended_turn"}
    assert all(m["items"] == 2 for m in report["metrics"] if m["metric"] != "genuine_followup")
    assert set(report["stage_seconds"]) >= {"train", "probe+judge trained (held-out items)", "export"}
    out = capsys.readouterr().out
    assert "vs base on 2 held-out" in out and "Δ (pp)" in out
    # resume: nothing is generated or trained again
    assert main(argv) == 0
    assert "already trained" in capsys.readouterr().err
    assert len((run / "trained-held-out" / "results.jsonl").read_text().splitlines()) == 4 + 1  # and its config line
