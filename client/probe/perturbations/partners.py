"""Where a partner-needing perturbation's partner comes from: a ring of the dataset's item ids."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator


class PartnerRing:
    """The dataset's item ids in an order hashed from the run seed, read as a ring: an item's partner candidates are
    the ids after it. The order ignores file order, --limit and --shuffle-seed, so an item keeps its partner."""

    def __init__(self, seed: int, ids: Iterable[str]) -> None:
        def rank(item_id: str) -> tuple[bytes, str]:
            return hashlib.blake2b(f"{seed}\x1fswap\x1f{item_id}".encode(), digest_size=16).digest(), item_id

        self.order: list[str] = sorted(set(ids), key=rank)
        self._position = {item_id: n for n, item_id in enumerate(self.order)}

    def after(self, item_id: str) -> Iterator[str]:
        """The other ids, starting with the one after `item_id` on the ring (none if `item_id` is not on it)."""
        n = self._position.get(item_id)
        if n is None:
            return iter(())
        size = len(self.order)
        return (self.order[(n + step) % size] for step in range(1, size))
