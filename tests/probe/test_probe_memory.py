"""The probe holds no per-item data beyond what is in flight: items are read as they are probed."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence

from mock_http import MockServer
from test_pipeline import completion, run, settings

from userturn.client.data.dataset import DatasetItem
from userturn.core.jsonl import read_records


class OnDemandItems(Sequence[DatasetItem]):
    """Builds each item when asked for it and tracks how many are alive at once."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.alive = 0
        self.most_alive = 0
        self.built = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            raise TypeError("no slices")
        if not 0 <= index < self.n:
            raise IndexError(index)
        item = DatasetItem.model_validate({"id": f"q{index}", "answer": str(index), "messages": [
            {"role": "user", "content": f"What is {index}?"}, {"role": "assistant", "content": f"It is {index}."}]})
        self.built += 1
        self.alive += 1
        weakref.finalize(item, self._died)
        self.most_alive = max(self.most_alive, self.alive)
        return item

    def _died(self) -> None:
        self.alive -= 1

    def __iter__(self) -> Iterator[DatasetItem]:
        return (self[i] for i in range(self.n))


async def test_items_are_not_all_held_at_once(tmp_path):
    held = 4 + 2  # the items of the jobs in flight (concurrency 4) and the one being prepared
    its = OnDemandItems(300)
    with MockServer() as mock:
        mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, settings(temperatures=[1.0], samples=2, concurrency=4), its=its)
    assert summary.ok == 600
    assert its.most_alive <= held, its.most_alive  # never the dataset
    records, _ = read_records(tmp_path / "out.jsonl")
    assert len(records) == 600

    its = OnDemandItems(300)  # resume: everything is done, nothing is sent, still nothing is held
    with MockServer() as mock:
        route = mock.post("/completions").mock(side_effect=completion)
        summary = await run(mock, tmp_path, settings(temperatures=[1.0], samples=2, concurrency=4), its=its)
    assert summary.skipped == 600 and summary.ok == 0 and route.call_count == 0
    assert its.most_alive <= held, its.most_alive
