"""`report --gold`: the judge against people (gold n, base rate, kappa, Se, Sp, the labellers' own kappa) and the
Rogan-Gladen corrected rate, on cases computed by hand (docs/statistics.md)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from userturn.cli import main
from userturn.core.records import JudgeVerdict, ProbeRecord
from userturn.judges.gold import GoldLine, append_gold
from userturn.report.calibration import calibrate, gold_set
from userturn.report.correction import MIN_YOUDEN, correct, rogan_gladen

SHA = "ab" * 32
GF, RQ = "genuine_followup", "related_new_query"


def record(item: str, label: str | None, *, model: str = "qwen-test", judge: str = "J",
           rule: bool = False) -> ProbeRecord:
    verdicts = [] if label is None else [JudgeVerdict(judge="rule:restates" if rule else judge,
                                                      source="rule" if rule else "judge", status="ok", label=label,
                                                      prompt_sha256=None if rule else SHA)]
    return ProbeRecord(key=f"{model}|d|{item}|none|0|0", model=model, dataset="d", item_id=item, temperature=0.0,
                       sample=0, seed=0, messages=[{"role": "user", "content": "q"}], user_turn="t", status="ok",
                       label=label, label_source=None if label is None else ("rule" if rule else "judge"),
                       judges=verdicts)


def write(path: Path, records: list[ProbeRecord]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r.model_dump(mode="json")) + b"\n" for r in records))
    return path


def hand_case(tmp_path: Path) -> tuple[Path, Path]:
    """40 items, one record each, judge J: 15 labelled genuine (p = 0.375). 16 of them carry gold: 8 genuine (the
    judge says genuine for 6: Se = 6/8 = 0.75) and 8 not (the judge says genuine for 2: Sp = 6/8 = 0.75)."""
    judge_says = [True] * 6 + [False] * 2 + [True] * 2 + [False] * 6 + [True] * 7 + [False] * 17
    gold = [True] * 8 + [False] * 8
    records = [record(f"i{n:02d}", GF if says else RQ) for n, says in enumerate(judge_says)]
    results = write(tmp_path / "results.jsonl", records)
    gold_path = tmp_path / "gold.jsonl"
    for n, genuine in enumerate(gold):
        append_gold(gold_path, GoldLine(key=records[n].key, label=GF if genuine else RQ, labeller="ann"))
    return results, gold_path


def test_hand_case_calibration_and_corrected_rate(tmp_path: Path) -> None:
    results, gold = hand_case(tmp_path)
    calibrations = calibrate([results], [gold])
    c = calibrations.of([f"J@{SHA[:12]}"])
    assert c is not None
    assert (c.n_gold, c.true_positives, c.false_negatives, c.false_positives, c.true_negatives) == (16, 6, 2, 2, 6)
    assert (c.sensitivity, c.specificity, c.base_rate) == (0.75, 0.75, 0.5)
    # kappa: observed agreement 12/16 = 0.75, chance 0.5 * 0.5 + 0.5 * 0.5 = 0.5 -> (0.75 - 0.5) / 0.5 = 0.5
    assert c.kappa == pytest.approx(0.5)
    assert (calibrations.unmatched, calibrations.unlabelled) == (0, 0)
    # (0.375 + 0.75 - 1) / (0.75 + 0.75 - 1) = 0.125 / 0.5 = 0.25
    assert rogan_gladen(0.375, 0.75, 0.75) == pytest.approx(0.25)


def test_report_json_with_and_without_gold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, gold = hand_case(tmp_path)
    assert main(["report", str(results), "--json", "--gold", str(gold)]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["followup_rate"] == pytest.approx(0.375)
    assert row["followup_corrected"] == pytest.approx(0.25)
    low, high = row["corrected_ci_low"], row["corrected_ci_high"]
    assert low < 0.25 < high
    assert high - low > row["ci_high"] - row["ci_low"]  # sampling and calibration error: wider than uncorrected
    assert row["calibration"]["n_gold"] == 16 and row["calibration"]["kappa"] == pytest.approx(0.5)
    assert (row["calibration"]["sensitivity"], row["calibration"]["specificity"]) == (0.75, 0.75)
    assert main(["report", str(results), "--json", "--gold", str(gold)]) == 0  # seeded: the same interval again
    [again] = json.loads(capsys.readouterr().out)
    assert (again["corrected_ci_low"], again["corrected_ci_high"]) == (low, high)
    assert main(["report", str(results), "--json"]) == 0
    [plain] = json.loads(capsys.readouterr().out)
    assert all(plain[k] is None for k in ("followup_corrected", "corrected_ci_low", "corrected_ci_high",
                                          "calibration"))


def test_table_shows_the_corrected_column_and_calibration(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    results, gold = hand_case(tmp_path)
    assert main(["report", str(results), "--gold", str(gold), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "corrected" in out and "25.0%" in out and "37.5%" in out
    line = next(x for x in out.splitlines() if "J@" in x and " 16 " in x)
    assert "50.0%" in line and "0.500" in line and "75.0% [40.9, 92.9]" in line  # base rate, kappa, Se/Sp
    flat = " ".join(out.split())
    assert "judge genuine 6 (TP), not 2 (FN)" in flat and "judge genuine 2 (FP), not 6 (TN)" in flat  # --wide
    assert "uncalibrated" not in out
    assert main(["report", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.count("judge uncalibrated") == 1 and "corrected\n" not in out


def test_formats_carry_the_corrected_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, gold = hand_case(tmp_path)
    for fmt, expected in (("markdown", "25.0 ["), ("latex", "25.0 ["), ("csv", "0.25")):
        assert main(["report", str(results), "--format", fmt, "--gold", str(gold)]) == 0
        assert expected in capsys.readouterr().out, fmt


def test_two_labellers_majority_and_their_kappa() -> None:
    """4 keys, labellers a and b: agree on k1 (genuine), k2 (not), disagree on k3 and k4. Gold keeps k1, k2 (a tie
    leaves a key out). Their kappa: observed 2/4 = 0.5; a says genuine 3/4 (k1, k3, k4? no: k1, k3), b 2/4 ->
    a: k1 yes, k2 no, k3 yes, k4 no; b: k1 yes, k2 no, k3 no, k4 yes. p_yes(a) = p_yes(b) = 0.5, chance 0.5,
    kappa = (0.5 - 0.5) / 0.5 = 0."""
    a = {"k1": GF, "k2": RQ, "k3": GF, "k4": RQ}
    b = {"k1": GF, "k2": RQ, "k3": RQ, "k4": GF}
    answers = {(k, name): GoldLine(key=k, label=label, labeller=name)
               for name, labels in (("a", a), ("b", b)) for k, label in labels.items()}
    gold = gold_set(answers)
    assert gold.labels == {"k1": True, "k2": False} and gold.disputed == 2
    assert gold.labeller_kappa == pytest.approx(0.0) and gold.labeller_items == 4
    third = dict(answers) | {("k3", "c"): GoldLine(key="k3", label=GF, labeller="c")}
    assert gold_set(third).labels["k3"] is True  # 2 of 3 say genuine


def test_rule_labels_count_for_every_panel_and_chance_judge_is_not_corrected(tmp_path: Path) -> None:
    """A judge with Se = 1/2, Sp = 1/2 (Se + Sp - 1 = 0) gets no corrected rate, and says why."""
    records = [record("i0", GF), record("i1", RQ), record("i2", GF), record("i3", RQ, rule=True)]
    results = write(tmp_path / "r.jsonl", records)
    gold = tmp_path / "g.jsonl"
    for r, label in zip(records, (GF, GF, RQ, RQ), strict=True):
        append_gold(gold, GoldLine(key=r.key, label=label, labeller="ann"))
    calibrations = calibrate([results], [gold])
    c = calibrations.of([f"J@{SHA[:12]}"])
    assert c is not None and c.n_gold == 4  # the rule-labelled record counts for J's panel too
    assert (c.true_positives, c.false_negatives, c.false_positives, c.true_negatives) == (1, 1, 1, 1)
    fixed = correct(0.5, 4, 1.0, c)
    assert fixed.rate is None and fixed.note is not None and str(MIN_YOUDEN) in fixed.note


def test_gold_keys_without_records_are_counted(tmp_path: Path) -> None:
    results = write(tmp_path / "r.jsonl", [record("i0", GF), record("i1", None)])
    gold = tmp_path / "g.jsonl"
    for key in ("qwen-test|d|i0|none|0|0", "qwen-test|d|i1|none|0|0", "nowhere"):
        append_gold(gold, GoldLine(key=key, label=GF, labeller="ann"))
    calibrations = calibrate([results], [gold])
    assert (calibrations.gold_keys, calibrations.unmatched, calibrations.unlabelled) == (3, 1, 1)


def test_html_has_the_calibration_and_the_corrected_column(tmp_path: Path) -> None:
    results, gold = hand_case(tmp_path)
    assert main(["report", str(results), "--gold", str(gold), "--html", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert "corrected (95% CI)" in html and "25.0% [" in html
    assert 'id="calibration"' in html and "75.0% [40.9, 92.9]" in html and "<td class=\"num\">6</td>" in html
    assert main(["report", str(results), "--html", str(tmp_path / "plain.html")]) == 0
    plain = (tmp_path / "plain.html").read_text()
    assert "judge uncalibrated" in plain and "corrected (95% CI)" not in plain


def test_run_printout_calibrates_on_the_experiments_gold(tmp_path: Path) -> None:
    """`run` with `gold:` prints the calibration under its table; without it, the one uncalibrated line."""
    from rich.console import Console

    from userturn.report.run_view import print_run_report

    results, gold = hand_case(tmp_path)
    console = Console(width=100, record=True)
    groups = print_run_report(console, results, gold=[str(gold)])
    assert groups[0].followup_corrected == pytest.approx(0.25)
    out = console.export_text()
    assert "Judge calibration" in out and "25.0%" in out
    console = Console(width=100, record=True)
    print_run_report(console, results)
    assert console.export_text().count("judge uncalibrated") == 1


def test_controls_line_before_any_judge() -> None:
    from userturn.report.controls import controls_lines
    from userturn.report.summary import summarise

    rows = summarise([record("a", None, model="human"), record("b", None, model="human"),
                      record("a", None, model="human-shuffled")])
    assert controls_lines(rows) == ["controls (d): 2 human and 1 shuffled next turns await a judge model (rules "
                                    "never label a genuine follow-up)"]


def test_experiment_gold_must_exist_before_the_run(tmp_path: Path) -> None:
    from userturn.core.errors import UserError
    from userturn.orchestrate.experiment import check_files, load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text("name: g\nmodels: [{model: m, base_url: 'http://127.0.0.1:9/v1'}]\ndatasets: [mt-bench]\n"
                    "gold: [labels.jsonl]\n")
    exp, _ = load_experiment(path)
    with pytest.raises(UserError, match=r"exp.yaml: gold.0: file not found: labels.jsonl"):
        check_files(exp, path)
    (tmp_path / "labels.jsonl").write_text("")
    check_files(exp, path)


def test_gold_that_matches_nothing_is_said_not_uncalibrated(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    results, _ = hand_case(tmp_path)
    gold = tmp_path / "other.jsonl"
    append_gold(gold, GoldLine(key="elsewhere", label=GF, labeller="ann"))
    append_gold(gold, GoldLine(key="elsewhere", label=RQ, labeller="bob"))
    append_gold(gold, GoldLine(key="there", label=GF, labeller="ann"))
    assert main(["report", str(results), "--gold", str(gold), "--html", str(tmp_path / "r.html")]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "gold: 1 keys labelled by ann, bob (one label per key: the labellers' majority on genuine vs not; ties " \
           "left out: 1); 1 match no record, 0 only records without a label" in flat
    assert "Judge calibration" not in flat and "uncalibrated" not in flat
    html = (tmp_path / "r.html").read_text()
    assert "uncalibrated" not in html and "1 match no record" in html


def test_the_rules_alone_get_no_calibration_row_beside_a_judged_row(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    records = [record("i0", GF), record("i1", RQ), record("i2", RQ, rule=True)]
    results = write(tmp_path / "r.jsonl", records)
    gold = tmp_path / "g.jsonl"
    for r in records:
        append_gold(gold, GoldLine(key=r.key, label=RQ if r.item_id == "i1" else GF, labeller="ann"))
    assert main(["report", str(results), "--gold", str(gold)]) == 0
    out = capsys.readouterr().out
    assert "rules only" not in out and "J@" in out


def test_a_perfect_judge_leaves_the_rate_as_it_is() -> None:
    """Se = Sp = 1 (50 gold genuine, 50 not, all labelled right): pi = (p + 1 - 1) / (1 + 1 - 1) = p; the interval
    still widens a little (100 gold labels do not prove a perfect judge)."""
    from userturn.report.calibration import Calibration

    c = Calibration(panel=["J"], n_gold=100, true_positives=50, false_negatives=0, false_positives=0,
                    true_negatives=50, base_rate=0.5, sensitivity=1.0, specificity=1.0, sensitivity_ci=None,
                    specificity_ci=None, kappa=1.0, labellers=["ann"], labeller_kappa=None, labeller_items=0,
                    disputed=0)
    fixed = correct(0.3, 200, 1.0, c)
    assert fixed.rate == pytest.approx(0.3) and fixed.ci_low is not None and fixed.ci_high is not None
    assert fixed.ci_low < 0.3 < fixed.ci_high
    assert correct(None, 0, None, c).note == "no labelled record"


def test_the_corrected_interval_covers_the_true_rate_about_95_percent_of_the_time() -> None:
    """Seeded simulation: true rate 0.2, judge Se 0.85 and Sp 0.9, 200 gold labels (half genuine on average), 1000
    records of one item each. Over 300 repetitions the interval holds the true rate in 93-98% of them (the
    simulation's own standard error is about 1.3 points); the uncorrected rate is biased (0.2 * 0.85 + 0.8 * 0.1 =
    0.25) and its interval rarely holds 0.2."""
    import numpy as np

    from userturn.report.calibration import Calibration

    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(300):
        pos = int(rng.binomial(200, 0.5))
        tp, tn = int(rng.binomial(pos, 0.85)), int(rng.binomial(200 - pos, 0.9))
        c = Calibration(panel=["J"], n_gold=200, true_positives=tp, false_negatives=pos - tp,
                        false_positives=200 - pos - tn, true_negatives=tn, base_rate=pos / 200, sensitivity=tp / pos,
                        specificity=tn / (200 - pos), sensitivity_ci=None, specificity_ci=None, kappa=None,
                        labellers=[], labeller_kappa=None, labeller_items=0, disputed=0)
        truth = rng.random(1000) < 0.2
        says = np.where(truth, rng.random(1000) < 0.85, rng.random(1000) < 0.1)
        fixed = correct(float(says.mean()), 1000, 1.0, c)
        assert fixed.ci_low is not None and fixed.ci_high is not None
        hits += fixed.ci_low <= 0.2 <= fixed.ci_high
    assert 0.93 <= hits / 300 <= 0.98
