"""docs/results-format.md stays true: its record schema table names exactly the fields a record has."""

from __future__ import annotations

import re
from pathlib import Path

from userturn.core.records import JudgeVerdict, ProbeRecord

DOC = (Path(__file__).resolve().parents[2] / "docs" / "results-format.md").read_text(encoding="utf-8")


def test_record_fields_in_the_schema_table_exist():
    section = DOC.split("\n## Record schema\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([a-z_0-9]+)`", row)}
    fields = set(ProbeRecord.model_fields)
    assert documented == fields, (documented - fields, fields - documented)
    verdict_row = next(line for line in section.splitlines() if line.startswith("| `judges`"))
    assert set(re.findall(r"`([a-z_0-9]+)`", verdict_row.split("|")[3])) == set(JudgeVerdict.model_fields)
