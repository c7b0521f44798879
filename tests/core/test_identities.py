"""Identities that are equal exactly, not probably: one rule for when two temperatures are the same (keys, seeds,
options, the report's rows and filters), and digests in place of Python's salted `hash()` (the report's record and
item identities, the judge's "same turn"). Hand-made cases."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from userturn.client.probe.seeds import sample_seed
from userturn.core.errors import UserError
from userturn.core.options import Options, ProbeOptions
from userturn.core.records import line_group_key, record_key, temperature_value
from userturn.core.text import digest
from userturn.report.filters import at_temperatures
from userturn.report.scan import scan_files


def old_seed(base: int, item: str, t: float, sample: int) -> int:
    """The seed as every earlier release computed it (`:g` of the temperature)."""
    material = f"{base}\x1f{item}\x1f{float(t):g}\x1f{sample}\x1fnone\x1fraw"
    return int.from_bytes(hashlib.blake2b(material.encode(), digest_size=8).digest(), "big") % (2**31 - 1)


@pytest.mark.parametrize(("a", "b"), [(0.1 + 0.2, 0.3), (0.7000001, 0.7), (1, 1.0), (1e-7, 1.0000001e-7)])
def test_the_same_temperature_is_the_same_key_seed_option_row_and_filter(a: float, b: float) -> None:
    assert a != b or type(a) is not type(b)  # different as given
    assert temperature_value(a) == temperature_value(b)
    assert record_key("m", "d", "q", "none", a, 0) == record_key("m", "d", "q", "none", b, 0)
    assert sample_seed(0, "q", a, 3) == sample_seed(0, "q", b, 3)
    assert Options(temperatures=[a]).temperatures == ProbeOptions(temperatures=[b]).temperatures
    line = {"model": "m", "dataset": "d", "temperature": a}
    assert line_group_key(line) == line_group_key({**line, "temperature": b})
    assert at_temperatures([a], {b}, "row")(b)


@pytest.mark.parametrize(("a", "b"), [(0.3, 0.30001), (0.7, 0.70001), (0.0, 1e-9)])
def test_different_temperatures_stay_apart_everywhere(a: float, b: float) -> None:
    assert record_key("m", "d", "q", "none", a, 0) != record_key("m", "d", "q", "none", b, 0)
    assert sample_seed(0, "q", a, 0) != sample_seed(0, "q", b, 0)
    assert not at_temperatures([a], {a, b}, "row")(b)
    with pytest.raises(UserError, match="no row at that temperature"):
        at_temperatures([b], {a}, "row")


def test_seeds_of_existing_files_do_not_move() -> None:
    for t in (0.0, 0.1 + 0.2, 0.5, 0.7, 0.7000001, 1.0, 1.3, 2.0, 1e-7):
        for sample in range(3):
            assert sample_seed(42, "item-7", t, sample) == old_seed(42, "item-7", t, sample)


def test_a_digest_is_the_same_in_every_process_and_tells_values_apart() -> None:
    here = [digest(v).hex() for v in ("turn", None, ("k", "f"), b"turn")]
    assert len(set(here)) == 4 and digest("") != digest(None) and digest("turn") != digest(b"turn")
    code = ("from userturn.core.text import digest; "
            "print(' '.join(digest(v).hex() for v in ('turn', None, ('k', 'f'), b'turn')))")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                             env={**os.environ, "PYTHONHASHSEED": seed}).stdout.split()
        assert out == here


def test_the_report_keeps_the_last_line_of_each_key_and_configuration(tmp_path: Path) -> None:
    def line(key: str, fp: str, item: str, label: str) -> dict[str, object]:
        return {"schema_version": 3, "key": key, "status": "ok", "config_fingerprint": fp, "model": "m",
                "dataset": "d", "mode": "raw", "perturbation": "none", "temperature": 0.0, "sample": 0,
                "item_id": item, "label": label, "label_source": "judge", "judge_status": "ok", "judges": []}
    lines = [line("k1", "f" * 16, "a", "generic"), line("k1", "f" * 16, "a", "genuine_followup"),
             line("k1", "e" * 16, "a", "generic"), line("k2", "f" * 16, "b", "generic")]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    scan = scan_files(path)
    assert scan.keep_mask().tolist() == [False, True, True, True]
    _, items, _, _ = scan.kept_columns(scan.keep_mask())
    assert items.tolist() == [0, 0, 1]  # item ids compared as values: "a" twice, then "b"


def test_the_judge_skips_a_key_only_when_its_turn_is_the_same_text(tmp_path: Path) -> None:
    from userturn.core.records import ProbeRecord
    from userturn.judges.backlog import JudgingScan
    from userturn.judges.run_judge import JUDGE, SKIP, plan_input

    def record(key: str, turn: str) -> ProbeRecord:
        return ProbeRecord(model="m", dataset="d", item_id=key, perturbation="none", mode="raw", key=key,
                           temperature=0.0, sample=0, seed=1, status="ok", user_turn=turn)
    results = tmp_path / "r.jsonl"
    results.write_text("".join(record(k, t).model_dump_json() + "\n" for k, t in
                               (("same", "Why?"), ("changed", "Why not?"), ("new", "How?"))))
    output = JudgingScan(tmp_path / "r.judged.jsonl", done={digest("same"): digest("Why?"),
                                                            digest("changed"): digest("Why?")})
    plan = plan_input(results, output)  # keys by their digests: exact, and half the memory of a million strings
    assert {key: packed & 3 for key, packed in plan.entries.items()} == {
        digest("same"): SKIP, digest("changed"): JUDGE, digest("new"): JUDGE}
    assert (plan.todo, plan.skipped, plan.carry) == (2, 1, 0)
