"""`userturn show`: generated user turns beside the human next turn, with who labelled them."""

from __future__ import annotations

from pathlib import Path

from userturn.cli import main
from userturn.core.jsonl import JsonlWriter
from userturn.core.records import ProbeRecord, record_key

CONVO = [{"role": "user", "content": "How many brothers does David have?"}, {"role": "assistant", "content": "One."}]


def rec(item: str, turn: str | None, *, meta: dict | None = None, label: str | None = None,
        status: str = "ok") -> ProbeRecord:
    return ProbeRecord(key=record_key("m", "mt-bench", item, "none", 0.0, 0), model="m", dataset="mt-bench",
                       item_id=item, temperature=0.0, sample=0, seed=0, messages=CONVO, status=status,
                       user_turn=turn, meta=meta, label=label, label_source="rule" if label else None,
                       error=None if status == "ok" else "boom")


def test_show_prints_generated_and_human_turns_and_labels(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # every cell on one line
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:
        writer.write(rec("104", "How many brothers does David have?", meta={"second_turn": "What if each sister "
                         "has two brothers?"}, label="restates_query"))
        writer.write(rec("105", "Why one?"))
        writer.write(rec("106", None, status="error"))
    assert main(["show", str(results)]) == 0
    out = capsys.readouterr().out
    assert "human next turn" in out and "What if each sister has two brothers?" in out
    assert "restates_query" in out and "(rule)" in out and "unjudged" in out and "106" not in out
    assert main(["show", str(results), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "(first 1 of 2)" in out and "Why one?" not in out


def test_show_without_human_turns_has_no_such_column_and_bad_limit(tmp_path: Path, capsys):
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:
        writer.write(rec("1", "Why one?"))
    assert main(["show", str(results)]) == 0
    assert "human next turn" not in capsys.readouterr().out
    assert main(["show", str(results), "--limit", "0"]) == 2
    assert "--limit must be at least 1" in capsys.readouterr().err


def grid_record(model: str, sample: int, *, item: str = "q1", label: str | None = None,
                perturbation: str = "none") -> ProbeRecord:
    return ProbeRecord(key=record_key(model, "mt-bench", item, perturbation, 0.0, sample), model=model,
                       dataset="mt-bench", item_id=item, perturbation=perturbation, temperature=0.0, sample=sample,
                       seed=sample, messages=CONVO, status="ok", user_turn=f"turn of {model} s{sample}",
                       label=label, label_source="rule" if label else None)


def write_grid(path: Path) -> list[ProbeRecord]:
    records = [grid_record(m, s) for m in ("org/alpha-1B", "org/beta-7B") for s in (0, 1)]
    with JsonlWriter(path) as writer:
        for r in records:
            writer.write(r)
    return records


def table_rows(out: str) -> list[str]:
    """The key cells of a printed table (first column), header and rules left out."""
    cells = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    return [c for c in cells if c and c != "key"]


def test_show_tells_models_and_samples_apart_and_every_key_opens(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    results = tmp_path / "r.jsonl"
    records = write_grid(results)
    assert main(["show", str(results)]) == 0
    out = capsys.readouterr().out
    keys = table_rows(out)
    assert len(keys) == 4 and len(set(keys)) == 4  # four distinct rows of one item, one key each
    assert "org/alpha-1B" in out and "org/beta-7B" in out
    for short, record in zip(keys, records, strict=True):
        assert main(["show", str(results), short]) == 0
        view = capsys.readouterr().out
        assert view.startswith(f"record       {record.key}\n") and f"sample {record.sample}" in view
    table = [line.rstrip() for line in out.splitlines()[1:]]
    assert max(len(line) for line in table) <= 100 and all(line[-1] in "┓┃┩│┤┘" for line in table)  # not cropped


def test_show_filters_by_model_label_perturbation_and_item(tmp_path: Path, capsys):
    results = tmp_path / "r.jsonl"
    with JsonlWriter(results) as writer:
        writer.write(grid_record("org/alpha-1B", 0, label="restates_query"))
        writer.write(grid_record("org/alpha-1B", 0, item="q2"))
        writer.write(grid_record("org/beta-7B", 0, item="q2", perturbation="generic"))
    assert main(["show", str(results), "--model", "*beta*"]) == 0
    out = capsys.readouterr().out
    assert len(table_rows(out)) == 1 and "beta" in out and "alpha" not in out
    assert main(["show", str(results), "--label", "unjudged", "--item", "q?"]) == 0
    assert len(table_rows(capsys.readouterr().out)) == 2
    assert main(["show", str(results), "--perturb", "none", "--item", "q2"]) == 0
    out = capsys.readouterr().out
    assert len(table_rows(out)) == 1 and "alpha" in out and "beta" not in out
    assert main(["show", str(results), "--label", "restates_query", "--label", "unjudged"]) == 0
    assert len(table_rows(capsys.readouterr().out)) == 3
    assert main(["show", str(results), "--model", "gamma*"]) == 2
    err = capsys.readouterr().err
    assert "--model gamma*: matches nothing" in err and "org/alpha-1B" in err and len(err.strip().splitlines()) == 1


def test_show_prefix_keys_resolve_unique_and_refuse_ambiguous(tmp_path: Path, capsys):
    results = tmp_path / "r.jsonl"
    records = write_grid(results)
    assert main(["show", str(results), "org/beta-7B|mt-bench|q1|"]) == 2  # 2 beta records
    err = capsys.readouterr().err
    assert "ambiguous: 2 records match" in err and len(err.strip().splitlines()) == 1
    assert main(["show", str(results), "org/beta-7B|mt-bench|q1|raw|none|t=0.0|s=1"[:-1] + "0"]) == 0
    assert capsys.readouterr().out.startswith(f"record       {records[2].key}\n")
    assert main(["show", str(results), records[1].key]) == 0  # a full key as before
    assert capsys.readouterr().out.startswith(f"record       {records[1].key}\n")
    assert main(["show", str(results), records[1].key, "--model", "x"]) == 2
    assert "--model filters the table" in capsys.readouterr().err


def test_short_keys_grow_until_unique():
    from userturn.client.short_keys import key_hash, short_keys

    keys = [f"k{i}" for i in range(5000)]
    short = short_keys(keys)
    assert len(set(short.values())) == 5000 and all(key_hash(k).startswith(short[k]) for k in keys)
    assert min(len(v) for v in short.values()) == 7
    # k7671 and k20777: sha256 4bb86b5… both (found by search); they need an eighth digit, the others keep seven
    pair = short_keys(["k7671", "k20777", "k1"])
    assert key_hash("k7671")[:7] == key_hash("k20777")[:7] == "4bb86b5"
    assert len(pair["k7671"]) == len(pair["k20777"]) == 8 and pair["k7671"] != pair["k20777"]
    assert len(pair["k1"]) == 7


def test_show_at_100_columns_cuts_no_word(tmp_path: Path, capsys, monkeypatch):
    """Every word of every cell appears whole: narrow terminals stack model, item, T, s and perturbation in one
    cell, and the label column is as wide as its longest label."""
    monkeypatch.setenv("COLUMNS", "100")
    results = tmp_path / "r.jsonl"
    record = grid_record("org/alpha-1B", 0, perturbation="wrong_answer", label="genuine_followup")
    record = record.model_copy(update={"perturbation_detail": {"rule": "####", "original": "72", "new": "75"},
                                       "user_turn": "Why did you subtract eighteen from the remaining apples?",
                                       "label_source": "majority"})
    with JsonlWriter(results) as writer:
        writer.write(record)
    assert main(["show", str(results)]) == 0
    out = capsys.readouterr().out
    words = {w for line in out.splitlines()[1:] for w in line.replace("│", " ").replace("┃", " ").split()}
    for word in ("genuine_followup", "(majority)", "wrong_answer", "subtract", "remaining", "apples?",
                 "org/alpha-1B", "72", "→", "75", "T=0", "s=0", "brothers"):
        assert word in words, (word, out)
    table = [line.rstrip() for line in out.splitlines()[1:]]
    assert max(len(line) for line in table) <= 100 and all(line[-1] in "┓┃┩│┤┘" for line in table)
    assert main(["show", str(results), table_rows(out)[0]]) == 0  # the record view names what was changed
    assert 'perturbed    {"rule":"####","original":"72","new":"75"}' in capsys.readouterr().out


def test_show_has_the_report_s_filters_names_failed_judgements_and_prints_json(tmp_path: Path, capsys):
    import json

    from userturn.core.records import JudgeVerdict

    results = tmp_path / "r.jsonl"
    failed = grid_record("m", 0, item="q3").model_copy(update={
        "judge_status": "error", "judges": [JudgeVerdict(judge="j", status="error", error="unparseable")]})
    warm = grid_record("m", 1, item="q4").model_copy(update={
        "temperature": 1.0, "key": record_key("m", "mt-bench", "q4", "none", 1.0, 1)})
    other = grid_record("m", 0, item="q5").model_copy(update={
        "dataset": "gsm8k", "key": record_key("m", "gsm8k", "q5", "none", 0.0, 0)})
    with JsonlWriter(results) as writer:
        for r in (failed, warm, other, grid_record("m", 0, item="q6")):
            writer.write(r)
    assert main(["show", str(results), "--label", "judge_failed"]) == 0
    out = capsys.readouterr().out
    assert len(table_rows(out)) == 1 and "judge_failed" in out and "unjudged" not in out
    assert main(["show", str(results), "--label", "unjudged"]) == 0
    assert len(table_rows(capsys.readouterr().out)) == 3  # a failed judgement is not "unjudged"
    assert main(["show", str(results), "--temperature", "1", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["key"] for x in lines] == [warm.key] and lines[0]["temperature"] == 1.0
    assert main(["show", str(results), "--dataset", "gsm*", "--json"]) == 0
    assert [json.loads(x)["item_id"] for x in capsys.readouterr().out.splitlines()] == ["q5"]
    assert main(["show", str(results), "--temperature", "0.7"]) == 2
    assert "--temperature 0.7: no record at that temperature (present: 0, 1)" in capsys.readouterr().err
