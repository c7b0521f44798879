"""client.batch_steps: a batch taken through its steps gives what unit by unit gives, failures included."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from userturn.client.batch_steps import StepSlots, take


class Boom(Exception):
    pass


def numbers(count: int, fail_at: int | None = None) -> Iterator[int]:
    for n in range(count):
        if n == fail_at:
            raise Boom(f"read {n}")
        yield n


def test_take_returns_the_values_before_a_failure_and_the_failure():
    values = numbers(10, fail_at=6)
    assert take(values, 4) == ([0, 1, 2, 3], None)
    batch, failure = take(values, 4)
    assert batch == [4, 5] and isinstance(failure, Boom) and str(failure) == "read 6"
    assert take(values, 4) == ([], None)  # a generator that raised has ended
    assert take(iter(range(3)), 5) == ([0, 1, 2], None)


# A unit n is planned into: error results ("e", n) when n % 5 == 0, else a pending unit that three steps finish.
# `fails` maps (stage, n) to the exception raised there; stage 0 is planning.
def one_by_one(units: list[int], fails: dict[tuple[int, int], Exception],
               read_failure: Exception | None) -> tuple[list[object], Exception | None]:
    """The reference: each unit planned and taken through every step before the next one."""
    out: list[object] = []
    for n in units:
        try:
            if (0, n) in fails:
                raise fails[(0, n)]
            if n % 5 == 0:
                out.append(("e", n))
                continue
            value = [n]
            for stage in (1, 2, 3):
                if (stage, n) in fails:
                    raise fails[(stage, n)]
                value.append(stage)
            out.append(tuple(value))
        except Boom as exc:
            return out, exc
    return out, read_failure


def batched(units: list[int], fails: dict[tuple[int, int], Exception],
            read_failure: Exception | None) -> tuple[list[object], Exception | None]:
    slots: StepSlots[list[object], object] = StepSlots(read_failure)

    def plan(n: int) -> None:
        if (0, n) in fails:
            raise fails[(0, n)]
        if n % 5 == 0:
            slots.add_done([("e", n)])
        else:
            slots.add_pending([n])

    def stage(number: int, last: bool = False):
        def work(unit: list[object]) -> list[object] | None:
            if (number, unit[0]) in fails:
                raise fails[(number, unit[0])]
            unit.append(number)
            return [tuple(unit)] if last else None
        return work

    for n in units:
        if not slots.run_one(plan, n):
            break
    slots.step(stage(1))
    slots.step(stage(2))
    slots.step(stage(3, last=True))
    return list(slots.results()), slots.failure


def cases() -> Iterator[tuple[dict[tuple[int, int], Exception], Exception | None]]:
    yield {}, None
    yield {}, Boom("next read")
    for (s1, n1), (s2, n2) in itertools.combinations(itertools.product(range(4), range(1, 9)), 2):
        yield {(s1, n1): Boom(f"{s1}:{n1}"), (s2, n2): Boom(f"{s2}:{n2}")}, None
        yield {(s1, n1): Boom(f"{s1}:{n1}")}, Boom("next read")


def test_every_pair_of_failures_ends_the_batch_where_one_by_one_does():
    units = list(range(1, 9))
    checked = 0
    for fails, read_failure in cases():
        expected, expected_failure = one_by_one(units, fails, read_failure)
        got, failure = batched(units, fails, read_failure)
        assert got == expected, fails
        assert failure is expected_failure, fails
        checked += 1
    assert checked > 900


def test_a_unit_left_without_results_is_an_error_not_a_silent_drop():
    slots: StepSlots[int, int] = StepSlots()
    slots.add_pending(1)
    slots.step(lambda unit: None)
    with pytest.raises(RuntimeError, match="without results"):
        list(slots.results())
