"""client/data/lazy_dataset.py: a dataset kept on disk behaves like the parsed list (same items, order, errors)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from userturn.client.data.dataset import load_jsonl
from userturn.client.data.lazy_dataset import JsonlItems, load_jsonl_lazy
from userturn.client.data.loaders import load_dataset_spec, select
from userturn.core.errors import UserError


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


@pytest.mark.parametrize("block", [1, 64, 300, 1 << 20])
def test_screened_raw_lines_are_the_lines_the_screen_passes(tmp_path: Path, monkeypatch, block: int) -> None:
    from userturn.client.data import lazy_dataset

    monkeypatch.setattr(lazy_dataset, "SCREEN_BLOCK", block)
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": ("needle " if i % 9 == 4 else "hay ")
                                                                                  + "x" * (i * 37 % 500)}]})
             for i in range(60)]
    path.write_text("\n\n".join(lines[:30]) + "\n  \n" + "\n".join(lines[30:]))  # blank lines; no final newline
    items = load_jsonl_lazy(path)

    def screen(raw: bytes) -> bool:
        return b"needle" in raw

    expected = [(i, raw) for i, raw in items.raw_lines() if screen(raw)]
    assert [i for i, _ in expected] == [i for i in range(60) if i % 9 == 4]
    assert [(i, raw) for i, raw in items.raw_lines(screen) if screen(raw)] == expected
    assert list(items.raw_lines(lambda _raw: True)) == list(items.raw_lines())  # every line, stripped, in order
    assert list(items.raw_lines(lambda _raw: False)) == []
    view = items[10:50:3]
    assert [(i, r) for i, r in view.raw_lines(screen) if screen(r)] == [(i, r) for i, r in view.raw_lines()
                                                                         if screen(r)]
    shuffled = items.shuffled(3)  # out of file order: line by line
    assert list(shuffled.raw_lines(screen)) == list(shuffled.raw_lines())
