"""The record schema: keys, their format, and records as plain pydantic JSON lines."""

from __future__ import annotations

import orjson
import pytest

from userturn.core.errors import UserError
from userturn.core.records import (
    SCHEMA_VERSION,
    Message,
    ProbeRecord,
    check_key_format,
    condition_suffix,
    key_prefix,
    key_prefixes,
    record_key,
)

SHARED = {
    "model": "qwen3", "dataset": "gsm8k", "item_id": "q7", "mode": "raw", "perturbation": "wrong_answer",
    "messages": [Message(role="user", content="Wie viel ist 2+2? 🙂\n\t\"quoted\" \\ \x00"),
                 Message(role="assistant", content="4 \u2028 done", reasoning_content="short")],
    "assistant_source": "model", "template_sha256": "t" * 64, "prompt_sha256": "p" * 64,
    "reference_answer": "4", "correct": True, "task_scores": {"gsm8k": 1.0}, "meta": {"level": 3, "tags": ["a"]},
}

SAMPLE = {"key": "k|1", "temperature": 0.7, "sample": 3, "seed": 123456789, "user_turn": "Why 4? <|im_end|> é",
          "finish_reason": "stop", "matched_stop": "<|im_end|>", "latency_s": 0.012345, "attempts": 2}

USAGE = {"prompt_tokens": 300, "completion_tokens": 12, "total_tokens": 312}


def test_a_record_line_reads_back_as_the_same_record():
    record = ProbeRecord(**SHARED, **SAMPLE, usage=USAGE, status="ok")
    line = record.model_dump_json()
    assert ProbeRecord.model_validate_json(line) == record
    assert "config" not in orjson.loads(line)  # the configuration is a line of its own (records.ConfigLine)


def test_resume_fields_come_first_on_each_line():
    """`userturn.core.resume_index` reads only a line's head: the fields a resume needs lead every record line."""
    line = ProbeRecord(**SHARED, **SAMPLE, status="ok", config_fingerprint="f" * 16).model_dump_json()
    assert list(orjson.loads(line))[:6] == ["schema_version", "key", "status", "judge_status", "config_fingerprint",
                                           "model"]


def test_record_key_is_readable_and_normalises_temperature():
    assert record_key("m", "d", "q1", "none", 1, 0) == record_key("m", "d", "q1", "none", 1.0, 0)
    assert record_key("m", "d", "q1", "none", 0.7, 2, "chat") == "m|d|q1|chat|none|t=0.7|s=2"
    assert record_key("Qwen/Qwen3-8B", "gsm8k", "test-00042", "none", 0, 0) == \
        "Qwen/Qwen3-8B|gsm8k|test-00042|raw|none|t=0.0|s=0"


def test_record_key_escapes_the_separator_so_fields_cannot_collide():
    assert record_key("m", "d", "x|y", "none", 0.7, 0) == "m|d|x%7Cy|raw|none|t=0.7|s=0"
    assert record_key("m", "d|x", "y", "none", 0.7, 0) == "m|d%7Cx|y|raw|none|t=0.7|s=0"
    assert record_key("m", "d", "x%7Cy", "none", 0.7, 0) == "m|d|x%257Cy|raw|none|t=0.7|s=0"  # `%` escaped first
    texts = ["", "|", "%", "%7C", "a|", "|a", "a%|b", "%25"]
    fields = [(m, d, i, p) for m in texts for d in texts for i in texts for p in ("none", "x|y")]
    keys = {record_key(m, d, i, p, 0.0, 0) for m, d, i, p in fields}
    assert len(keys) == len(fields)  # no two field tuples share a key
    assert all(key.count("|") == 6 for key in keys)


@pytest.mark.parametrize(("a", "b"), [(0.7, 0.70001), (1e-7, 1.00001e-7), (0.3, 0.30001), (1.0, 1.00001)])
def test_record_key_tells_temperatures_apart_at_six_digits(a, b):
    assert record_key("m", "d", "q", "none", a, 0) != record_key("m", "d", "q", "none", b, 0)
    assert record_key("m", "d", "q", "none", b, 0).split("|")[5] == f"t={b!r}"
    assert float(record_key("m", "d", "q", "none", a, 0).split("|")[5][2:]) == a  # reads back as the same float


def test_old_format_keys_are_refused_with_one_line():
    check_key_format(SCHEMA_VERSION, "out.jsonl", "m|d|q|raw|none|t=0.0|s=0")
    with pytest.raises(UserError, match=r"^out\.jsonl: record 'm\|d\|q\|raw\|none\|t=0\|s=0' has schema_version 1"):
        check_key_format(1, "out.jsonl", "m|d|q|raw|none|t=0|s=0")


def test_special_tokens_flag_is_in_the_schema_and_optional():
    record = ProbeRecord(**SHARED, **SAMPLE, status="ok")
    assert record.special_tokens_in_content is None  # older records (and chat mode) say nothing
    flagged = ProbeRecord(**{**SHARED, "special_tokens_in_content": True}, **SAMPLE, status="ok")
    assert ProbeRecord.model_validate_json(flagged.model_dump_json()).special_tokens_in_content is True


@pytest.mark.parametrize("fields", [("m", "d", "i", "none", "raw"), ("m|x", "d%7C", "i|%", "wrong_answer", "chat"),
                                    ("", "", "0", "swap", "raw")])
@pytest.mark.parametrize(("temperature", "sample"), [(0, 0), (0.7, 3), (1, 12), (1e-7, 1), (0.70001, 0)])
def test_key_prefix_and_condition_suffix_build_exactly_record_key(fields, temperature, sample):
    model, dataset, item_id, perturbation, mode = fields
    escaped = [f.replace("%", "%25").replace("|", "%7C") for f in (model, dataset, item_id, mode, perturbation)]
    expected = "|".join([*escaped, f"t={float(temperature)!r}", f"s={sample}"])  # the documented format (6 digits)
    assert key_prefix(model, dataset, item_id, perturbation, mode) + condition_suffix(temperature, sample) == expected
    assert record_key(model, dataset, item_id, perturbation, temperature, sample, mode) == expected


@pytest.mark.parametrize("fields", [("m", "d", "none", "raw"), ("Qwen/Qwen3|8B", "gsm%8k", "x|y", "chat"),
                                    ("", "", "", "raw")])
def test_key_prefixes_are_key_prefix(fields):
    model, dataset, perturbation, mode = fields
    prefix = key_prefixes(model, dataset, perturbation, mode)
    for item_id in ("q1", "a|b", "%7C", "", "é|%"):
        assert prefix(item_id) == key_prefix(model, dataset, item_id, perturbation, mode)


def test_one_group_key_for_records_and_raw_lines() -> None:
    from userturn.core.records import GroupKey, group_key, line_group_key

    line = {"key": "m|d|q1|raw|swap|t=0.7|s=1", "model": "m", "dataset": "d", "item_id": "q1", "mode": "raw",
            "perturbation": "swap", "temperature": 0.7, "sample": 1, "seed": 3, "status": "ok", "messages": []}
    record = ProbeRecord.model_validate(line)
    assert group_key(record) == line_group_key(line) == GroupKey("m", "d", "raw", "swap", 0.7)
    assert line_group_key({"model": "m", "dataset": "d", "temperature": 1}) == ("m", "d", "raw", "none", 1.0)
    from userturn.core.records import line_group_values

    # the report's per-line cache key keeps the temperature as the line holds it (1 and 1.0 and True stay apart)
    assert line_group_values({"model": "m", "dataset": "d", "temperature": 1}) == ("m", "d", "raw", "none", 1)
    key = group_key(record)
    assert key.series == ("m", "d", "raw", "swap") and key.unperturbed() == GroupKey("m", "d", "raw", "none", 0.7)
