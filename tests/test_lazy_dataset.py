"""client/lazy_dataset.py: a dataset kept on disk behaves like the parsed list (same items, order, errors)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from userturn.client.dataset import load_jsonl
from userturn.client.lazy_dataset import JsonlItems, load_jsonl_lazy
from userturn.client.loaders import load_dataset_spec, select

from userturn.errors import UserError


def write(path: Path, n: int, *, last_user: set[int] = frozenset()) -> Path:  # type: ignore[assignment]
    with path.open("w") as fh:
        for i in range(n):
            messages = [{"role": "user", "content": f"q{i} ✓"}]
            if i not in last_user:
                messages.append({"role": "assistant", "content": f"a{i}"})
            fh.write(json.dumps({"id": i if i % 2 else f"x{i}", "messages": messages, "answer": i}) + "\n")
            if i % 7 == 0:
                fh.write("\n   \n")
    return path


def test_same_items_in_the_same_order(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", 40)
    lazy = load_jsonl_lazy(path)
    assert isinstance(lazy, JsonlItems) and len(lazy) == 40
    assert list(lazy) == load_jsonl(path)
    assert lazy[17] == load_jsonl(path)[17]
    assert lazy.ids == [i.id for i in load_jsonl(path)]
    assert lazy.all_end_with_assistant
    assert not load_jsonl_lazy(write(tmp_path / "e.jsonl", 5, last_user={3})).all_end_with_assistant


@pytest.mark.parametrize(("limit", "seed"), [(None, None), (5, None), (None, 3), (7, 11)])
def test_select_matches_the_list_version(tmp_path: Path, limit: int | None, seed: int | None) -> None:
    path = write(tmp_path / "d.jsonl", 30)
    expected = select(load_jsonl(path), limit=limit, shuffle_seed=seed)
    name, items = load_dataset_spec(str(path), limit=limit, shuffle_seed=seed)
    assert name == "d" and isinstance(items, JsonlItems)
    assert list(items) == list(expected)


@pytest.mark.parametrize(("content", "message"), [
    ('{"id": 1, "messages": [{"role": "user", "content": "x"}]}\n{broken\n', r":2: invalid JSON"),
    ('{"id": 1, "messages": [{"role": "user", "content": "x"}]}\n[1]\n', r":2: expected a JSON object, got list"),
    ('{"id": 1, "messages": []}\n', r":1: messages: List should have at least 1 item"),
    ('{"id": 1, "messages": [{"role": "user", "content": "x"}]}\n' * 2, r":2: duplicate id '1' \(first on line 1\)"),
    ("\n\n", r": no items$"),
])
def test_errors_are_the_eager_loaders(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=message) as lazy:
        load_jsonl_lazy(path)
    with pytest.raises(UserError) as eager:
        load_jsonl(path)
    assert str(lazy.value) == str(eager.value)


def test_a_file_changed_under_the_run_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", 3)
    items = load_jsonl_lazy(path)
    lines = path.read_text().splitlines(keepends=True)
    random.Random(0).shuffle(lines)
    path.write_text("".join(lines).replace('"x0"', '"y0"'))
    with pytest.raises(UserError, match="changed while the run was reading it"):
        list(items)


def test_a_line_edited_in_place_under_the_run_is_an_error_even_with_its_id(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", 3)
    items = load_jsonl_lazy(path)
    text = path.read_text()
    edited = text.replace('"q1 ', '"Q1 ')  # same length, same ids: only item 1's content differs
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    assert items[0].messages == load_jsonl(path)[0].messages  # untouched lines still read
    with pytest.raises(UserError, match=r"changed while the run was reading it \(item '1'\)"):
        items[1]
