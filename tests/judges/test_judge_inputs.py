"""What `userturn judge` reads and writes besides verdicts: results files re-serialised by other tools, damaged
records on resume."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx

from userturn.cli import main
from userturn.core.jsonl import is_config_line, read_configs

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden" / "probe.jsonl"
BASE = "http://judge.test/v1"
OK = httpx.Response(200, json={"choices": [{"message": {"content": '{"rationale": "r", "label": "generic"}'}}]})
RESERIALISED = {  # how people rewrite JSONL: Python's json.dumps, `jq -cS .` (keys sorted, compact)
    "json.dumps": lambda obj: json.dumps(obj),
    "json.dumps sorted": lambda obj: json.dumps(obj, sort_keys=True),
    "jq -cS": lambda obj: json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
}


@pytest.mark.parametrize("dump", RESERIALISED.values(), ids=RESERIALISED.keys())
def test_every_reader_recognises_a_reserialised_configuration_line(dump) -> None:
    config = next(obj for obj in map(json.loads, GOLDEN.read_text().splitlines()) if obj.get("type") == "config")
    record = json.loads(GOLDEN.read_text().splitlines()[0])
    assert is_config_line(dump(config).encode()) and not is_config_line(dump(record).encode())
    record["user_turn"] = 'say {"type": "config"}'
    assert not is_config_line(dump(record).encode())  # a record quoting one is a record
    assert not is_config_line(b'{"type": "config", torn')


@pytest.mark.parametrize("dump", RESERIALISED.values(), ids=RESERIALISED.keys())
def test_judge_accepts_a_results_file_reserialised_by_other_tools(dump, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.jsonl"
    lines = GOLDEN.read_text().splitlines()
    results.write_text("".join(dump(json.loads(line)) + "\n" for line in lines))
    with respx.mock(using="httpx", base_url=BASE) as mock:
        mock.get("/models").mock(return_value=httpx.Response(404))
        route = mock.post("/chat/completions").mock(return_value=OK)
        assert main(["judge", str(results), "--judge-base-url", BASE, "--judge-model", "j", "--no-progress"]) == 0
    judged = tmp_path / "results.judged.jsonl"
    assert route.call_count > 0 and read_configs(judged).keys() == read_configs(GOLDEN).keys()
    assert main(["report", str(judged), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sum(r["n"] for r in rows) == sum(r["records"] for r in rows) - sum(r["generation_errors"] for r in rows)
