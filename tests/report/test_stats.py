"""Item-clustered intervals and paired differences (userturn/report/stats.py) on cases computed by hand."""

from __future__ import annotations

import math

import pytest

from userturn.report.stats import (
    Z95,
    ItemTallies,
    clustered_rate,
    conservative_correlation,
    paired_difference,
    wilson_interval,
)

# The issue's case: 5 items x 4 samples, items 1 and 2 always follow up, the other three never.
ISSUE_Y, ISSUE_M = [4, 4, 0, 0, 0], [4, 4, 4, 4, 4]


def test_issue_example_is_the_wilson_interval_over_items() -> None:
    assert wilson_interval(8, 20) == pytest.approx((0.2188, 0.6134), abs=5e-5)  # what the samples-as-draws said
    rate = clustered_rate(ISSUE_Y, ISSUE_M)
    assert rate is not None
    assert (rate.rate, rate.n, rate.items) == (0.4, 20, 5)
    # residuals y_i - p m_i: 2.4, 2.4, -1.6, -1.6, -1.6 -> sum of squares 19.2 -> var 19.2 / 20^2 = 0.048;
    # binomial var 0.4 * 0.6 / 20 = 0.012 -> design effect 4 -> effective n 5, effective successes 2
    assert rate.design_effect == pytest.approx(4.0) and rate.effective_n == pytest.approx(5.0)
    assert (rate.ci_low, rate.ci_high) == pytest.approx((0.1176, 0.7693), abs=5e-5)


def test_one_sample_per_item_is_the_usual_wilson_interval() -> None:
    y = [1] * 7 + [0] * 13
    rate = clustered_rate(y, [1] * 20)
    assert rate is not None and rate.design_effect == pytest.approx(1.0) and rate.items == 20
    assert (rate.ci_low, rate.ci_high) == pytest.approx(wilson_interval(7, 20))


@pytest.mark.parametrize(("y", "low", "high"), [([0] * 5, 0.0, 0.4345), ([4] * 5, 0.5655, 1.0)])
def test_all_zero_and_all_one_count_each_item_once(y: list[int], low: float, high: float) -> None:
    rate = clustered_rate(y, [4] * 5)
    assert rate is not None and rate.effective_n == pytest.approx(5.0)
    assert (rate.ci_low, rate.ci_high) == pytest.approx((low, high), abs=5e-5)
    one = clustered_rate([y[0] // 4] * 5, [1] * 5)  # the same with one sample per item: the same interval
    assert one is not None and (one.ci_low, one.ci_high) == pytest.approx((rate.ci_low, rate.ci_high))


def test_unequal_items_by_hand() -> None:
    # items: 2/2, 0/2, 1/2 plus one item with nothing labelled (left out)
    rate = clustered_rate([2, 0, 1, 0], [2, 2, 2, 0])
    assert rate is not None and (rate.n, rate.items, rate.rate) == (6, 3, 0.5)
    # residuals 1, -1, 0 -> var_cluster 2 / 36; var_binomial 0.25 / 6 -> deff 4/3, effective n 4.5
    assert rate.design_effect == pytest.approx(4 / 3)
    z2 = Z95 * Z95
    n = 4.5
    centre = (0.5 + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(0.25 / n + z2 / (4 * n * n)) / (1 + z2 / n)
    assert (rate.ci_low, rate.ci_high) == pytest.approx((centre - half, centre + half))
    assert (rate.ci_low, rate.ci_high) == pytest.approx((0.1607, 0.8393), abs=5e-5)


def test_design_effect_never_below_one_and_bad_input() -> None:
    rate = clustered_rate([2, 2], [4, 4])  # both items at exactly the pooled rate
    assert rate is not None and rate.design_effect == 1.0
    assert clustered_rate([], []) is None and clustered_rate([0], [0]) is None
    with pytest.raises(ValueError):
        clustered_rate([3], [2])


def test_paired_difference_worked_example() -> None:
    """The README's worked example: wrong_answer (items 1-3 always follow up) against none (items 1-2)."""
    wrong = ItemTallies.from_mapping({f"i{k}": (4 if k <= 3 else 0, 4) for k in range(1, 6)})
    none = ItemTallies.from_mapping({f"i{k}": (4 if k <= 2 else 0, 4) for k in range(1, 6)})
    diff = paired_difference(wrong, none)
    assert (diff.items, diff.rate_a, diff.rate_b) == (5, 0.6, 0.4)
    assert diff.delta == pytest.approx(0.2)
    assert diff.correlation == pytest.approx(2 / 3) and diff.correlation_used == 0.0  # 5 items: lower limit < 0
    la, ua = wilson_interval(3, 5)  # each row: effective n 5 (design effect 4)
    lb, ub = wilson_interval(2, 5)
    assert diff.ci_low == pytest.approx(0.2 - math.hypot(0.6 - la, ub - 0.4))
    assert diff.ci_high == pytest.approx(0.2 + math.hypot(ua - 0.6, 0.4 - lb))
    assert (diff.ci_low, diff.ci_high) == pytest.approx((-0.3222, 0.5993), abs=5e-5)


def newcombe_method10(a: int, b: int, c: int, d: int, phi_used: float) -> tuple[float, float]:
    """Newcombe (1998) method 10 from the paired 2x2 table (a: both yes, b: first only, c: second only, d: neither)."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n)
    l2, u2 = wilson_interval(a + c, n)
    delta = p1 - p2
    low = delta - math.sqrt((p1 - l1) ** 2 - 2 * phi_used * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = delta + math.sqrt((u1 - p1) ** 2 - 2 * phi_used * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return low, high


def test_one_sample_per_item_is_newcombe_with_the_phi_coefficient() -> None:
    a, b, c, d = 30, 12, 4, 54  # 100 items, one sample each
    first = [1] * a + [1] * b + [0] * c + [0] * d
    second = [1] * a + [0] * b + [1] * c + [0] * d
    ids = range(a + b + c + d)
    diff = paired_difference(ItemTallies.from_mapping({i: (first[i], 1) for i in ids}),
                             ItemTallies.from_mapping({i: (second[i], 1) for i in ids}))
    phi = (a * d - b * c) / math.sqrt((a + b) * (c + d) * (a + c) * (b + d))
    assert diff.correlation == pytest.approx(phi)
    used = math.tanh(math.atanh(phi) - Z95 / math.sqrt(97))
    assert diff.correlation_used == pytest.approx(used) and 0 < used < phi
    assert diff.delta == pytest.approx(0.08)
    assert (diff.ci_low, diff.ci_high) == pytest.approx(newcombe_method10(a, b, c, d, used))
    unpaired_low, unpaired_high = newcombe_method10(a, b, c, d, 0.0)
    assert diff.ci_high - diff.ci_low < unpaired_high - unpaired_low  # the pairing narrows the interval


def test_paired_difference_uses_only_items_labelled_under_both() -> None:
    a = ItemTallies.from_mapping({"x": (1, 1), "y": (1, 1), "z": (0, 0), "only_a": (1, 1)})
    b = ItemTallies.from_mapping({"x": (0, 1), "y": (0, 1), "z": (1, 1), "only_b": (0, 1)})
    diff = paired_difference(a, b)
    assert (diff.items, diff.delta, diff.rate_a, diff.rate_b) == (2, 1.0, 1.0, 0.0)
    none = paired_difference(ItemTallies.from_mapping({"x": (1, 1)}), ItemTallies.from_mapping({"y": (1, 1)}))
    assert none.delta is None and none.ci_low is None and none.items == 0
    assert none.reason == "no item is labelled under both conditions"


def test_conservative_correlation() -> None:
    assert conservative_correlation(0.9, 3) == 0.0
    assert conservative_correlation(-0.4, 50) == -0.4
    assert conservative_correlation(1.0, 1000) == pytest.approx(math.tanh(math.atanh(0.9999) - Z95 / math.sqrt(997)))
    assert conservative_correlation(0.1, 10) == 0.0
