"""`userturn report`: one row per configuration and judge panel, item-clustered intervals, paired deltas, streaming."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import orjson
import pytest

from userturn.cli import main
from userturn.core.records import ProbeRecord
from userturn.report.summary import load_results, summarise, summarise_file

SHA_A, SHA_B = "a" * 64, "b" * 64


def config(perturbation: str = "none", **settings: object) -> tuple[str, dict]:
    body = {"max_tokens": 256, "top_p": 1.0, "template_sha256": "t" * 8, "perturbation": perturbation, **settings}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16], body


def rec(item: str, label: str | None = "generic", *, perturbation: str = "none", sample: int = 0,
        cfg: tuple[str, dict] | None = None, judge: str | None = "judge-a", sha: str = SHA_A,
        temperature: float = 0.0) -> dict:
    d: dict = {"key": f"m|d|{item}|raw|{perturbation}|t={temperature:g}|s={sample}", "model": "m", "dataset": "d",
               "item_id": item, "mode": "raw", "perturbation": perturbation, "temperature": temperature,
               "sample": sample, "seed": 1, "status": "ok", "user_turn": "turn", "label": label,
               "label_source": "judge" if label and judge else None, "judge_status": "ok" if label else None,
               "judges": [{"judge": judge, "source": "judge", "status": "ok", "label": label, "prompt_sha256": sha}]
               if label and judge else []}
    if cfg is not None:
        d["config_fingerprint"], d["config"] = cfg
    return d


def write(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records))
    return path


def issue_rows(perturbation: str, followers: int, cfg: tuple[str, dict] | None = None) -> list[dict]:
    """5 items x 4 samples; items 1..followers always follow up, the others never."""
    return [rec(f"i{k}", "genuine_followup" if k <= followers else "generic", perturbation=perturbation, sample=s,
                cfg=cfg) for k in range(1, 6) for s in range(4)]


def json_rows(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    assert main(["report", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def table(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["report", str(path)]) == 0
    return capsys.readouterr().out


def test_two_configurations_are_two_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    short, long = config(max_tokens=64), config()
    other_template = config(template_sha256="c" * 64, template_kwargs={"enable_thinking": False})
    path = write(tmp_path / "r.jsonl", [rec("i1", "genuine_followup", cfg=short), rec("i2", cfg=short),
                                        rec("i1", sample=1, cfg=long), rec("i3", sample=2),
                                        rec("i4", cfg=other_template)])
    rows = json_rows(path, capsys)
    assert len(rows) == 4
    by = {r["settings"]: r for r in rows}
    assert set(by) == {"max_tokens=64, template_kwargs.enable_thinking=∅, template_sha256=tttttttt",
                       "max_tokens=256, template_kwargs.enable_thinking=∅, template_sha256=tttttttt",
                       "max_tokens=256, template_kwargs.enable_thinking=false, template_sha256=cccccccccccc",
                       "unfingerprinted"}
    by = {k.split(",")[0]: v for k, v in by.items() if "thinking=∅" in k or k == "unfingerprinted"}
    assert (by["max_tokens=64"]["n"], by["max_tokens=64"]["followups"], by["max_tokens=256"]["n"]) == (2, 1, 1)
    assert by["max_tokens=64"]["config_fingerprint"] == short[0] and by["max_tokens=64"]["config"] == short[1]
    assert by["unfingerprinted"]["config_fingerprint"] is None and by["unfingerprinted"]["config"] is None
    out = table(path, capsys)
    assert "max_tokens=64" in out and "max_tokens=256" in out and "unfingerprinted" in out


def test_one_configuration_has_no_settings_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "r.jsonl", [rec("i1", cfg=config()), rec("i2", cfg=config())])
    [row] = json_rows(path, capsys)
    assert row["settings"] == "" and row["n"] == 2
    assert "settings" not in table(path, capsys)


def test_judge_panels_are_never_mixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [rec("i1", "genuine_followup", sha=SHA_A), rec("i2", sha=SHA_A), rec("i3", "genuine_followup", sha=SHA_B),
               rec("i4", None)]  # i4: generated, not judged
    rows = json_rows(write(tmp_path / "r.jsonl", records), capsys)
    by = {r["settings"]: r for r in rows}
    assert set(by) == {"judges judge-a@aaaaaaaaaaaa", "judges judge-a@bbbbbbbbbbbb", "judges none"}
    assert by["judges judge-a@aaaaaaaaaaaa"]["n"] == 2 and by["judges judge-a@bbbbbbbbbbbb"]["followups"] == 1
    assert by["judges none"]["unjudged"] == 1 and by["judges none"]["n"] == 0
    # With one panel, records no judge saw yet are counted in that panel's row.
    [row] = json_rows(write(tmp_path / "one.jsonl", records[:2] + records[3:]), capsys)
    assert (row["n"], row["unjudged"], row["records"], row["judge_panel"]) == (2, 1, 3, ["judge-a@aaaaaaaaaaaa"])


def test_items_and_the_clustered_interval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "r.jsonl", issue_rows("none", 2))
    [row] = json_rows(path, capsys)
    assert (row["n"], row["items"], row["followups"], row["followup_rate"]) == (20, 5, 8, 0.4)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.1176, 0.7693), abs=5e-5)  # not Wilson's 21.9-61.3
    assert row["design_effect"] == pytest.approx(4.0)
    out = table(path, capsys)
    assert "[11.8, 76.9]" in out and re.search(r" none +0 +20 +40\.0% ", out)
    html = tmp_path / "r.html"
    assert main(["report", str(path), "--html", str(html)]) == 0
    text = html.read_text()
    assert "<th>items</th>" in text and '<td class="num">5</td>' in text and "11.8–76.9" in text


def test_delta_vs_none_worked_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README "How to read the report": wrong_answer 12/20 (items 1-3) vs none 8/20 (items 1-2) -> +20.0 pp
    (-32.2 ... +59.9)."""
    path = write(tmp_path / "r.jsonl", issue_rows("none", 2, config("none")) +
                 issue_rows("wrong_answer", 3, config("wrong_answer")))
    rows = {r["perturbation"]: r for r in json_rows(path, capsys)}
    wrong, none = rows["wrong_answer"], rows["none"]
    assert none["delta_vs_none"] is None and none["delta_note"] is None
    assert wrong["delta_vs_none"] == pytest.approx(0.2) and wrong["delta_items"] == 5
    assert (wrong["delta_ci_low"], wrong["delta_ci_high"]) == pytest.approx((-0.3222, 0.5993), abs=5e-5)
    assert (wrong["ci_low"], wrong["ci_high"]) == pytest.approx((0.2307, 0.8824), abs=5e-5)
    assert wrong["settings"] == "" and none["settings"] == ""  # the perturbation is the only difference
    out = table(path, capsys)
    assert "+20.0" in out and "[-32.2, +59.9]" in out
    html = tmp_path / "r.html"
    assert main(["report", str(path), "--html", str(html)]) == 0
    assert "+20.0 (-32.2…+59.9; 5 items)" in html.read_text()


def test_delta_is_null_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    disjoint = [rec("i1", "genuine_followup"), rec("i2", perturbation="swap")]
    rows = {r["perturbation"]: r for r in json_rows(write(tmp_path / "a.jsonl", disjoint), capsys)}
    assert rows["swap"]["delta_vs_none"] is None and rows["swap"]["delta_ci_low"] is None
    assert rows["swap"]["delta_note"] == "no item is labelled under both conditions"
    # A none row of another configuration is no partner.
    other = [rec("i1", cfg=config("none", max_tokens=64)), rec("i1", perturbation="swap", cfg=config("swap"))]
    rows = {r["perturbation"]: r for r in json_rows(write(tmp_path / "b.jsonl", other), capsys)}
    assert rows["swap"]["delta_note"] == "no none row with the same configuration and judge panel"
    out = table(tmp_path / "b.jsonl", capsys)
    assert "n/a" in out and "no none row with the same configuration" in out


def test_delta_pairs_across_temperature_rows_only_at_the_same_temperature(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [rec("i1", "genuine_followup", temperature=1.0), rec("i1", perturbation="generic", temperature=1.0),
               rec("i1", temperature=0.0), rec("i1", "genuine_followup", perturbation="generic", temperature=0.0)]
    rows = {(r["perturbation"], r["temperature"]): r for r in json_rows(write(tmp_path / "r.jsonl", records), capsys)}
    assert rows[("generic", 1.0)]["delta_vs_none"] == -1.0
    assert rows[("generic", 0.0)]["delta_vs_none"] == 1.0


def test_the_last_line_of_a_key_counts_and_a_torn_tail_is_ignored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "r.jsonl", [rec("i1", None), rec("i2"), rec("i1", "genuine_followup")])
    with path.open("ab") as fh:
        fh.write(b'{"key": "m|d|i9|raw|none|t=0|s=0", "model": "m"')  # killed mid-write
    [row] = json_rows(path, capsys)
    assert (row["records"], row["n"], row["followups"], row["unjudged"], row["items"]) == (2, 2, 1, 0, 2)


def test_report_does_not_build_a_record_per_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "r.jsonl", issue_rows("none", 2))

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("report built a ProbeRecord")

    monkeypatch.setattr(ProbeRecord, "model_validate", refuse)
    monkeypatch.setattr(ProbeRecord, "model_validate_json", refuse)
    monkeypatch.setattr(ProbeRecord, "__init__", refuse)
    [row] = json_rows(path, capsys)
    assert row["n"] == 20


def test_loaded_records_give_the_same_rows(tmp_path: Path) -> None:
    # (without config fields: ProbeRecord drops them until the records schema carries them)
    path = write(tmp_path / "r.jsonl", issue_rows("none", 2) + issue_rows("swap", 1) + [rec("x", sha=SHA_B)])
    assert summarise(load_results(path)) == summarise_file(path).groups


def test_malformed_field_names_file_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = rec("i2")
    bad["config"] = "max_tokens=64"
    path = write(tmp_path / "r.jsonl", [rec("i1"), bad])
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: not a userturn record (config: Input should be a valid dictionary); the line is damaged" in err
    assert err.count("\n") == 1


def test_close_temperatures_are_shown_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Temperatures apart at 6 significant digits are two rows; closer ones are one temperature, one row
    (`records.temperature_value`)."""
    close = rec("i1", temperature=0.70001)
    same = rec("i2", temperature=0.7000001)  # an older file's spelling of 0.7
    out = table(write(tmp_path / "r.jsonl", [rec("i1", temperature=0.7), close, same]), capsys)
    assert re.search(r" 0\.70001 +1 ", out) and re.search(r" 0\.7 +2 ", out)


def test_report_benchmark_runs_small() -> None:
    """benchmarks/bench_report.py (the 1M-record memory measurement) on a small file: it runs and checks."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_report.py"
    done = subprocess.run([sys.executable, str(script), "--records", "3000", "--rejudged", "300"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "report --json:" in done.stdout and "report --html:" in done.stdout and "PASS" in done.stdout


def test_a_configuration_is_named_the_same_at_every_temperature(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [rec("i1", cfg=config(max_tokens=64)), rec("i2", cfg=config()),
               rec("i1", cfg=config(max_tokens=64), temperature=1.0)]  # at t=1 only one configuration
    rows = {(r["temperature"], r["settings"]) for r in json_rows(write(tmp_path / "r.jsonl", records), capsys)}
    assert rows == {(0.0, "max_tokens=64"), (0.0, "max_tokens=256"), (1.0, "max_tokens=64")}


def test_accuracy_counts_each_item_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item a: three samples of a correct turn; item b: one sample of a wrong turn (its other samples failed and
    carry the same score). Per sample that would read 4/6 correct; per item (the probed turn) it is 1 of 2."""
    records = [rec("a", sample=s) | {"correct": True} for s in range(3)]
    records += [rec("b", sample=0) | {"correct": False}]
    records += [rec("b", None, sample=s) | {"status": "error", "user_turn": None, "correct": False} for s in (1, 2)]
    rows = json_rows(write(tmp_path / "r.jsonl", records), capsys)
    assert [(r["accuracy"], r["accuracy_n"]) for r in rows] == [(0.5, 2)]
