"""A probe run is composed of parts with explicit interfaces: a plan, a request builder, an assistant-turn source and
a record writer, none of which subclasses another or probes another's attributes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from chatml_renderer import Renderer

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.item_source import ItemList, item_source
from userturn.client.data.lazy_dataset import load_jsonl_lazy
from userturn.client.probe.assistant_turns import AssistantTurns
from userturn.client.probe.pipeline import ProbeRun, ProbeSettings
from userturn.client.probe.planning import Plan
from userturn.client.probe.requests import RequestBuilder
from userturn.client.probe.writer import RecordWriter
from userturn.core.records import ConfigLine, ProbeRecord

PROBE = Path(__file__).parents[2] / "client" / "probe"
PARTS = ("pipeline.py", "planning.py", "requests.py", "assistant_turns.py", "writer.py")


def item(i: int, answered: bool = True) -> DatasetItem:
    answer = [{"role": "assistant", "content": f"A{i}"}] if answered else []
    messages = [{"role": "user", "content": f"Q{i}"}, *answer]
    return DatasetItem.model_validate({"id": f"q{i}", "messages": messages})


def test_a_run_owns_its_parts_and_none_is_a_subclass_of_another():
    run = ProbeRun([item(0)], ProbeSettings(model="m", dataset="d"), endpoints=[], renderer=Renderer(),
                   out_path="unused.jsonl", progress=False)
    assert isinstance(run.plan, Plan) and isinstance(run.requests, RequestBuilder)
    assert isinstance(run.assistant, AssistantTurns)
    for part in (ProbeRun, Plan, RequestBuilder, AssistantTurns, RecordWriter):
        assert part.__mro__ == (part, object), part.__mro__
    assert run.plan.configs is run.requests.configs and run.plan.size == 1


def test_the_parts_of_a_run_call_no_getattr_hasattr():
    for name in PARTS:
        calls = {node.func.id for node in ast.walk(ast.parse((PROBE / name).read_text()))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
        assert not calls & {"getattr", "hasattr"}, name


def test_items_in_memory_and_on_disk_answer_the_same_questions(tmp_path):
    items = [item(0), item(1, answered=False), item(2), item(3, answered=False)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(i.model_dump(exclude_none=True)) + "\n" for i in items))
    on_disk = load_jsonl_lazy(path)
    listed = item_source(items)
    assert isinstance(listed, ItemList) and item_source(listed) is listed
    assert listed.ids == ["q0", "q1", "q2", "q3"]
    assert listed.first_open() == (2, "q1", None)
    assert [(i.id, tag) for i, tag in listed.read_tagged([(2, "b"), (0, "a")])] == [("q2", "b"), ("q0", "a")]
    assert item_source(iter(items)).ids == listed.ids  # an iterable that is no sequence is listed once
    assert item_source(on_disk) is on_disk and on_disk.ids == listed.ids
    assert on_disk.first_open() == (2, "q1", f"{path}:2")


async def test_the_writer_puts_each_configuration_line_once_before_its_first_record(tmp_path):
    out = tmp_path / "out.jsonl"
    writer = RecordWriter(str(out), {"a" * 16: ConfigLine(fingerprint="a" * 16, config={"x": 1})})
    base = {"model": "m", "dataset": "d", "item_id": "q", "temperature": 0.0, "sample": 0, "seed": 1,
            "status": "ok", "config_fingerprint": "a" * 16}
    writer.write(ProbeRecord.model_validate({**base, "key": "k1"}))
    writer.write(ProbeRecord.model_validate({**base, "key": "k2"}))
    writer.close()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3 and lines[0].get("fingerprint") == "a" * 16 and [r.get("key") for r in lines[1:]] == [
        "k1", "k2"]
