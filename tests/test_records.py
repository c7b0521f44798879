"""The record schema's fast ok-line path matches the pydantic model byte for byte, and defers to it on odd values."""

from __future__ import annotations

import pytest

from userturn.errors import UserError
from userturn.records import (
    ITEM_FIELDS,
    SCHEMA_VERSION,
    Message,
    OkLineMaker,
    ProbeRecord,
    check_key_format,
    condition_suffix,
    config_json,
    key_prefix,
    key_prefixes,
    ok_line_template,
    ok_record_line,
    record_key,
    shared_json,
    template_fields,
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


def model_line(**sample) -> bytes:
    usage = sample.pop("usage")
    return ProbeRecord(**SHARED, **sample, usage=usage, status="ok").model_dump_json().encode() + b"\n"


@pytest.mark.parametrize("changes", [
    {},
    {"usage": None, "finish_reason": None, "matched_stop": None},
    {"matched_stop": 151645, "temperature": 1e-7, "latency_s": 1e16},
    {"temperature": 1, "user_turn": ""},
    {"usage": {**USAGE, "prompt_tokens_details": {"cached_tokens": 0}}},  # extra keys: dropped, as Usage does
    {"usage": {"completion_tokens": 5}},  # missing counts: null, as Usage does
])
def test_ok_line_is_byte_identical_to_the_model(changes):
    sample = {**SAMPLE, "usage": USAGE, **changes}
    fast = ok_record_line(ok_line_template(shared_json(SHARED)), **sample)
    assert fast == model_line(**sample)
    assert ProbeRecord.model_validate_json(fast).temperature == float(sample["temperature"])


CONFIGS = [None, {}, {"model": "m", "stop": ["<|im_end|>", "\n\n"], "top_p": None, "temperature": 0.1,
                     "extra_body": {"nested": {"a": [1, 2.5, None, True]}, "big": 2**62}, "seed": 0, "tuple": (1, 2)}]


@pytest.mark.parametrize("config", CONFIGS)
def test_shared_json_with_the_config_given_once_is_the_same(config):
    shared = {**SHARED, "config": config, "config_fingerprint": "f" * 16}
    given = shared_json(shared, config_json(config))
    assert given == shared_json(shared) and list(given) == list(shared_json(shared))
    sample = {**SAMPLE, "usage": USAGE}
    line = ok_record_line(ok_line_template(given), **sample)
    assert line == ProbeRecord(**shared, **sample, status="ok").model_dump_json().encode() + b"\n"


@pytest.mark.parametrize("config", CONFIGS)
def test_template_fields_rebuild_the_records_off_the_fast_path(config):
    shared = {**SHARED, "config": config, "config_fingerprint": "f" * 16}
    fields = template_fields(ok_line_template(shared_json(shared)))
    assert "key" not in fields and "status" not in fields and fields["item_id"] == "q7"
    per_sample = {"key": "k|9", "temperature": 0.7, "sample": 1, "seed": 5}
    for outcome in ({"status": "error", "error": "HTTP 500", "attempts": 3},
                    {"status": "ok", "user_turn": "why?", "finish_reason": "length", "attempts": 1}):
        rebuilt = ProbeRecord(**fields, **per_sample, **outcome)
        assert rebuilt.model_dump_json() == ProbeRecord(**shared, **per_sample, **outcome).model_dump_json()


def test_shared_json_is_reused_without_leaking_between_samples():
    base = ok_line_template(shared_json(SHARED))
    first = ok_record_line(base, **{**SAMPLE, "usage": USAGE})
    second = ok_record_line(base, **{**SAMPLE, "key": "k|2", "sample": 4, "usage": None})
    assert ProbeRecord.model_validate_json(first).key == "k|1"
    assert ProbeRecord.model_validate_json(second).usage is None


@pytest.mark.parametrize("changes", [
    {"finish_reason": 1},
    {"matched_stop": True},
    {"matched_stop": 1.5},
    {"usage": [1, 2]},
    {"usage": {"prompt_tokens": "300"}},
    {"usage": {"total_tokens": 12.0}},
])
def test_odd_server_values_are_left_to_the_model(changes):
    assert ok_record_line(ok_line_template(shared_json(SHARED)), **{**SAMPLE, "usage": USAGE, **changes}) is None


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


@pytest.mark.parametrize(("a", "b"), [(0.7, 0.7000001), (1e-7, 1.0000001e-7), (0.1 + 0.2, 0.3), (1e16, 1e16 + 2)])
def test_record_key_keeps_the_temperature_as_given(a, b):
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
    template = ok_line_template(shared_json({**SHARED, "special_tokens_in_content": True}))
    line = ok_record_line(template, **{**SAMPLE, "usage": None})
    assert ProbeRecord.model_validate_json(line).special_tokens_in_content is True


@pytest.mark.parametrize("fields", [("m", "d", "i", "none", "raw"), ("m|x", "d%7C", "i|%", "wrong_answer", "chat"),
                                    ("", "", "0", "swap", "raw")])
@pytest.mark.parametrize(("temperature", "sample"), [(0, 0), (0.7, 3), (1, 12), (1e-7, 1), (0.7000001, 0)])
def test_key_prefix_and_condition_suffix_build_exactly_record_key(fields, temperature, sample):
    model, dataset, item_id, perturbation, mode = fields
    escaped = [f.replace("%", "%25").replace("|", "%7C") for f in (model, dataset, item_id, mode, perturbation)]
    expected = "|".join([*escaped, f"t={float(temperature)!r}", f"s={sample}"])  # the documented format
    assert key_prefix(model, dataset, item_id, perturbation, mode) + condition_suffix(temperature, sample) == expected
    assert record_key(model, dataset, item_id, perturbation, temperature, sample, mode) == expected


ITEMS = [
    {},
    {"task_scores": {"gsm8k": 1, "exact": 0}, "correct": False},  # ints: the schema makes them floats (1.0)
    {"meta": {"big": 2**63, "nested": [{"a": None}, 1.5, "é\u2028"], "": True}, "reference_answer": None},
    {"meta": None, "task_scores": None, "correct": None, "special_tokens_in_content": False, "prompt_sha256": None},
    {"messages": [], "assistant_source": "dataset", "item_id": "x|y%\"\n"},
    {"messages": [Message(role="system", content=""), Message(role="tool", content="{}", tool_call_id="c1",
                                                              extra={"deep": [1, {"b": 2}]})]},
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("changes", ITEMS)
def test_ok_line_maker_gives_the_records_own_template(config, changes):
    shared = {**SHARED, "config": config, "config_fingerprint": "f" * 16, "special_tokens_in_content": True,
              **changes}
    run_fields = {k: v for k, v in shared.items() if k not in ITEM_FIELDS}
    item_fields = {k: v for k, v in shared.items() if k in ITEM_FIELDS}
    expected = ok_line_template(shared_json(shared))
    assert OkLineMaker(run_fields).template(item_fields) == expected
    assert OkLineMaker(run_fields, config_json(config)).template(item_fields) == expected
    sample = {**SAMPLE, "usage": USAGE}
    line = ok_record_line(OkLineMaker(run_fields).template(item_fields), **sample)
    assert line == ProbeRecord(**shared, **sample, status="ok").model_dump_json().encode() + b"\n"


def test_ok_line_maker_is_reused_across_items_without_leaking():
    run_fields = {k: v for k, v in SHARED.items() if k not in ITEM_FIELDS}
    maker = OkLineMaker(run_fields)
    first = maker.template({"item_id": "a", "meta": {"only": "a"}, "correct": True})
    second = maker.template({"item_id": "b"})
    fields = template_fields(second)
    assert (fields["item_id"], fields["meta"], fields["correct"], fields["messages"]) == ("b", None, None, [])
    assert template_fields(first)["meta"] == {"only": "a"}


@pytest.mark.parametrize("fields", [("m", "d", "none", "raw"), ("Qwen/Qwen3|8B", "gsm%8k", "x|y", "chat"),
                                    ("", "", "", "raw")])
def test_key_prefixes_are_key_prefix(fields):
    model, dataset, perturbation, mode = fields
    prefix = key_prefixes(model, dataset, perturbation, mode)
    for item_id in ("q1", "a|b", "%7C", "", "é|%"):
        assert prefix(item_id) == key_prefix(model, dataset, item_id, perturbation, mode)


def test_ok_line_maker_keeps_percent_signs_of_the_run_fields():
    shared = {**SHARED, "model": "m%s%b%%", "dataset": "d%", "config": {"stop": ["%b"]}, "config_fingerprint": "f"}
    run_fields = {k: v for k, v in shared.items() if k not in ITEM_FIELDS}
    item_fields = {k: v for k, v in shared.items() if k in ITEM_FIELDS}
    assert OkLineMaker(run_fields).template(item_fields) == ok_line_template(shared_json(shared))
