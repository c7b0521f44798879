"""A batch of work done one step at a time, with the results and the first error that one unit at a time gives.

The probe prepares a sample in several steps (parse, render, record template, request body), each in another
library. Taking a batch of units through each step in turn keeps one library's code and data in the CPU's caches
through the batch. `StepSlots` keeps what comes out exactly as unit by unit: results in order, and where a unit
fails, the results of the units before it and then that unit's exception (later units' results dropped).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")  # a unit that later steps finish
R = TypeVar("R")  # a result


def take(values: Iterator[T], count: int) -> tuple[list[T], Exception | None]:
    """Up to `count` values from `values`, and the exception it raised there (it has ended then) or None."""
    taken: list[T] = []
    try:
        taken.extend(itertools.islice(values, count))
    except Exception as exc:  # `extend` keeps what came before: the values ahead of the failure
        return taken, exc
    return taken, None


class StepSlots(Generic[U, R]):
    """The outputs of one batch, in order: slots of finished results and slots of units that later steps finish.

    `failure` is the exception that ends the batch (after its slots), or None. Item-by-item order is kept: a unit
    that fails in any step drops its own slot and every later one and becomes the failure, which it precedes.
    """

    def __init__(self, failure: Exception | None = None) -> None:
        self._slots: list[list[R] | None] = []
        self._pending: list[tuple[int, U]] = []
        self.failure = failure  # e.g. the reading of the next unit failed: after every slot of this batch

    def add_done(self, results: list[R]) -> None:
        self._slots.append(results)

    def add_pending(self, unit: U) -> None:
        self._pending.append((len(self._slots), unit))
        self._slots.append(None)

    def run_one(self, plan: Callable[..., None], *args: Any) -> bool:
        """`plan(*args)`, which adds slots; False when it raised: the slots it added before that stay, its exception
        is the failure, and the caller adds nothing more."""
        try:
            plan(*args)
        except Exception as exc:
            self.failure = exc
            return False
        return True

    def step(self, work: Callable[[U], list[R] | None]) -> None:
        """`work(unit)` for each pending unit, in order; a list it returns becomes the unit's results (the last step
        returns them). A unit that raises ends the batch there: its exception is the failure."""
        for position, (slot, unit) in enumerate(self._pending):
            try:
                results = work(unit)
            except Exception as exc:
                del self._slots[slot:]
                del self._pending[position:]
                self.failure = exc
                return
            if results is not None:
                self._slots[slot] = results

    def results(self) -> Iterator[R]:
        for results in self._slots:
            if results is None:
                raise RuntimeError("StepSlots: a unit was left without results (the last step returns them)")
            yield from results


__all__ = ["StepSlots", "take"]
