"""client/data/dataset.py: DatasetItem coercions and load_jsonl's file:line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from userturn.client.data.dataset import DatasetItem, load_jsonl
from userturn.core.errors import UserError

CONVERSATION = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}]


def item(id_: object = "a", **extra: object) -> dict[str, object]:
    return {"id": id_, "messages": CONVERSATION, **extra}


def write_lines(path: Path, *lines: object) -> Path:
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines),
                    encoding="utf-8")
    return path


def test_loads_items_in_order_with_optional_fields(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", item("a"), "", "   ",
                       item("b", answer="4", meta={"split": "test"}),
                       {"id": "c", "messages": [{"role": "user", "content": "hi", "name": "x"}]})
    items = load_jsonl(path)
    assert [i.id for i in items] == ["a", "b", "c"]
    assert items[0].answer is None
    assert items[1].answer == "4"
    assert items[1].meta == {"split": "test"}
    assert items[0].ends_with_assistant
    assert not items[2].ends_with_assistant
    assert items[2].messages[0].model_extra == {"name": "x"}  # extra message keys are kept


def test_numeric_id_and_answer_become_strings(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", item(7, answer=42), item(8, answer=0.5))
    items = load_jsonl(path)
    assert [(i.id, i.answer) for i in items] == [("7", "42"), ("8", "0.5")]


def test_limit_stops_early(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", item("a"), item("b"), "{broken")
    assert [i.id for i in load_jsonl(path, limit=2)] == ["a", "b"]  # the broken line is never read


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=rf"^dataset not found: {tmp_path}/nope.jsonl$"):
        load_jsonl(tmp_path / "nope.jsonl")


def test_directory_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="dataset not found"):
        load_jsonl(tmp_path)


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["empty", "blank-lines"])
def test_empty_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=rf"^{path}: no items$"):
        load_jsonl(path)


@pytest.mark.parametrize(("bad", "expected"), [
    ('{"id": "b", "messages": [', r"invalid JSON \(.+\)"),
    ("not json at all", r"invalid JSON \(.+\)"),
    ('["a", "b"]', r"expected a JSON object, got list"),
    ('"just a string"', r"expected a JSON object, got str"),
    ({"id": "b"}, r"messages: Field required"),
    ({"messages": CONVERSATION}, r"id: Field required"),
    ({"id": "b", "messages": []}, r"messages: List should have at least 1 item"),
    ({"id": "b", "messages": [{"role": "bot", "content": "hi"}]}, r"messages\.0\.role: Input should be 'system'"),
    ({"id": "b", "messages": [{"role": "user"}]}, r"messages\.0\.content: Field required"),
    ({"id": "b", "messages": [{"role": "user", "content": None}]}, r"messages\.0\.content: Input should be"),
    ({"id": "b", "messages": "hello"}, r"messages: Input should be a valid list"),
    ({"id": ["b"], "messages": CONVERSATION}, r"id: Input should be a valid string"),
    ({"id": "b", "messages": CONVERSATION, "meta": "x"}, r"meta: Input should be a valid dictionary"),
], ids=["truncated-json", "not-json", "array", "string", "no-messages", "no-id", "empty-messages", "wrong-role",
        "no-content", "null-content", "messages-not-list", "id-list", "meta-not-dict"])
def test_bad_line_names_file_and_line(tmp_path: Path, bad: object, expected: str) -> None:
    path = write_lines(tmp_path / "d.jsonl", item("a"), "", bad, item("c"))
    with pytest.raises(UserError) as info:
        load_jsonl(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: "), message
    assert "\n" not in message
    assert re.search(expected, message), message


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", item("a"), item("b"), item("a"))
    with pytest.raises(UserError, match=rf"^{path}:3: duplicate id 'a' \(first on line 1\)$"):
        load_jsonl(path)


def test_duplicate_after_int_coercion(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", item(1), item("1"))
    with pytest.raises(UserError, match=r":2: duplicate id '1'"):
        load_jsonl(path)


def test_non_utf8_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(json.dumps(item("a")).encode() + b"\n" + b'{"id": "\xff\xfe"}\n')
    with pytest.raises(UserError, match=rf"^{path}:2: invalid JSON"):
        load_jsonl(path)


def test_dataset_item_model_directly() -> None:
    parsed = DatasetItem.model_validate(item("z", answer=3))
    assert parsed.id == "z"
    assert parsed.answer == "3"
    assert parsed.messages[1].role == "assistant"


# -- hostile lines: each is one file:line error, never a traceback later in the run --------------------------------

USER, ASSISTANT = json.dumps(CONVERSATION[0]), json.dumps(CONVERSATION[1])
DEEP_OBJECT = '{"a":' * 40 + "1" + "}" * 40


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("raw", "expected"), [
    (f'{{"id": "b", "messages": [{USER}, {ASSISTANT}], "meta": {{"x": {nested(300)}}}}}',
     r"nested more than 32 levels deep"),
    (f'{{"id": "b", "messages": [{USER}, {ASSISTANT}], "meta": {DEEP_OBJECT}}}',
     r"nested more than 32 levels deep"),
    (f'{{"id": "b", "messages": [{USER}, {{"role": "assistant", "content": "4", "x": {nested(40)}}}]}}',
     r"nested more than 32 levels deep"),
    (f'{{"id": "b", "id": "c", "messages": [{USER}, {ASSISTANT}]}}', r"key 'id' appears twice in one object"),
    (f'{{"id": "b", "messages": [{{"role": "user", "content": "q", "content": "r"}}, {ASSISTANT}]}}',
     r"key 'content' appears twice in one object"),
    (f'{{"id" \t: "b", "messages": [{USER}], "meta": {{"k": "\\": x", "k"  :  1}}}}',
     r"key 'k' appears twice in one object"),
    (f'{{"id": "b", "messages": [{{"role": "user", "content": "q\\ud800"}}, {ASSISTANT}]}}',
     r"invalid JSON \(.*surrogate"),
    (f'{{"id": true, "messages": [{USER}, {ASSISTANT}]}}', r"id: .*not a boolean"),
    (f'{{"id": "", "messages": [{USER}, {ASSISTANT}]}}', r"id: String should have at least 1 character"),
    (f'{{"id": "a\\u0000b", "messages": [{USER}, {ASSISTANT}]}}', r"id: .*control characters"),
    (f'{{"id": "a\\nb", "messages": [{USER}, {ASSISTANT}]}}', r"id: .*control characters"),
    (f'{{"id": "{"x" * 1025}", "messages": [{USER}, {ASSISTANT}]}}', r"id: String should have at most 1024"),
    (f'{{"id": "b", "answer": false, "messages": [{USER}, {ASSISTANT}]}}', r"answer: .*not a boolean"),
    (f'{{"id": "b", "answer": {"9" * 400}, "messages": [{USER}, {ASSISTANT}]}}', r"invalid JSON"),
    (f'{{"id": "b", "messages": [{USER}, {{"role": "assistant", "content": "4", "reasoning_content": {{"x": 1}}}}]}}',
     r"message 1: reasoning_content must be a string"),
    (f'{{"id": "b", "messages": [{USER}, {{"role": "assistant", "content": "4", "tool_calls": "zzz"}}]}}',
     r"message 1: tool_calls must be a list of objects"),
], ids=["deep-array-300", "deep-object-40", "deep-message-extra", "repeated-key", "repeated-key-in-message",
        "repeated-key-spaced", "lone-surrogate", "bool-id", "empty-id", "nul-in-id", "newline-in-id", "long-id",
        "bool-answer", "huge-int", "reasoning-not-text", "tool-calls-not-list"])
def test_hostile_line_names_file_and_line(tmp_path: Path, raw: str, expected: str) -> None:
    path = write_lines(tmp_path / "d.jsonl", item("a"), raw, item("c"))
    with pytest.raises(UserError) as info:
        load_jsonl(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: ") and "\n" not in message, message
    assert re.search(expected, message), message


def test_nesting_at_the_bound_is_accepted(tmp_path: Path) -> None:
    # item (1) > meta (2) > 30 nested arrays (3..32)
    path = write_lines(tmp_path / "d.jsonl", f'{{"id": "a", "messages": [{USER}], "meta": {{"x": {nested(30)}}}}}')
    assert load_jsonl(path)[0].meta == {"x": json.loads(nested(30))}


def test_line_over_the_size_bound_is_refused_without_reading_it_whole(tmp_path: Path, monkeypatch) -> None:
    from userturn.client.data import lazy_dataset

    monkeypatch.setattr(lazy_dataset, "MAX_LINE_BYTES", 1 << 20)
    huge = json.dumps(item("b", meta={"blob": "x" * (2 << 20)}))
    path = write_lines(tmp_path / "d.jsonl", item("a"), huge)
    with pytest.raises(UserError, match=rf"^{path}:2: line longer than 1 MiB$"):
        load_jsonl(path)


def test_items_remember_where_they_were_read(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", item("a"), "", item("b"))
    assert [i.where for i in load_jsonl(path)] == [f"{path}:1", f"{path}:3"]
    assert DatasetItem.model_validate(item("z")).where is None


def test_text_oddities_that_are_valid_are_kept(tmp_path: Path) -> None:
    odd = "NUL \x00, RTL \u202e, BOM \ufeff, astral 🙂, max int 18446744073709551615"
    path = write_lines(tmp_path / "d.jsonl", {"id": 7, "messages": [{"role": "user", "content": odd}],
                                              "meta": {"n": 18446744073709551615}})
    parsed = load_jsonl(path)[0]
    assert parsed.messages[0].content == odd and parsed.meta == {"n": 18446744073709551615}


def test_key_like_text_inside_strings_is_not_a_repeated_key(tmp_path: Path) -> None:
    content = 'JSON in text: {"a": 1, "a": 2} and a quote \\": here'
    path = write_lines(tmp_path / "d.jsonl", {"id": "a", "messages": [{"role": "user", "content": content}],
                                              "meta": {"a": '"a":'}})
    assert load_jsonl(path)[0].messages[0].content == content


def test_a_copy_remembers_where_the_item_was_read(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", item("a"))
    original = load_jsonl(path)[0]
    copy = original.model_copy(update={"id": "a#a0"})
    assert (copy.id, copy.where) == ("a#a0", f"{path}:1")
    assert copy.model_dump() == {**original.model_dump(), "id": "a#a0"}  # the slot is not a field
