"""The items a probe run plans over, behind one interface whether they are held in memory (`ItemList`) or kept on
disk and parsed on access (`client.data.lazy_dataset.JsonlItems`): their ids without parsing, items read by index in
a given order, and the first item without an assistant turn (`ItemSource`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar, overload

from userturn.client.data.dataset import DatasetItem
from userturn.client.data.lazy_dataset import JsonlItems

T = TypeVar("T")


class ItemList(Sequence[DatasetItem]):
    """A sequence of items with the `ItemSource` interface; `ids` is read once. Items are taken from the sequence
    when asked for (one that builds each on demand holds none), an iterable that is no sequence is listed."""

    def __init__(self, items: Iterable[DatasetItem]) -> None:
        self._items: Sequence[DatasetItem] = items if isinstance(items, Sequence) else list(items)
        self.ids = [item.id for item in self._items]

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> DatasetItem: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[DatasetItem]: ...

    def __getitem__(self, index: int | slice) -> DatasetItem | Sequence[DatasetItem]:
        return self._items[index]

    def __iter__(self) -> Iterator[DatasetItem]:
        return iter(self._items)

    def read_tagged(self, tagged: Iterable[tuple[int, T]]) -> Iterator[tuple[DatasetItem, T]]:
        """(item, tag) for each (index, tag), in the order given."""
        items = self._items
        return ((items[index], tag) for index, tag in tagged)

    def first_open(self) -> tuple[int, str, str | None] | None:
        """(how many items do not end with an assistant turn, the first one's id, where it was read), or None."""
        count, first = 0, None
        for item in self._items:
            if not item.ends_with_assistant:
                count, first = count + 1, first or item
        return (count, first.id, first.where) if first is not None else None


ItemSource = JsonlItems | ItemList  # ids without parsing, `read_tagged`, `first_open`


def item_source(items: Iterable[DatasetItem]) -> ItemSource:
    """`items` as an `ItemSource`: a dataset kept on disk stays there; anything else is held as an `ItemList`."""
    if isinstance(items, JsonlItems | ItemList):
        return items
    return ItemList(items)


__all__ = ["ItemList", "ItemSource", "item_source"]
