"""Confidence intervals for follow-up rates, clustered by item: the k samples of one item share a prompt, so they
are not k independent draws. Every interval is computed from per-item tallies (followups, labelled), closed-form
and deterministic, O(items) per row: `clustered_rate` (Wilson at the effective sample size n / deff; Kish 1965,
Korn & Graubard 1998) and `paired_difference` (Newcombe 1998 method 10 / MOVER, Zou & Donner 2008).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

Z95 = 1.959963984540054  # standard normal quantile for a two-sided 95% interval


def wilson_interval(successes: float, n: float) -> tuple[float, float] | None:
    """Wilson score interval (Wilson 1927) for successes/n, inside [0, 1]; None when n == 0. `successes` and `n`
    may be non-integer (an effective sample size); ValueError when successes is outside 0..n."""
    if n <= 0:
        return None
    if not 0 <= successes <= n * (1 + 1e-12):
        raise ValueError(f"successes ({successes}) must be within 0..n ({n})")
    p = min(1.0, successes / n)
    z2 = Z95 * Z95
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


class ClusteredRate(BaseModel):
    """A rate over items with several samples each, and its item-clustered 95% interval."""

    rate: float
    n: int  # labelled samples
    items: int  # distinct items behind n
    design_effect: float  # variance inflation from clustering, >= 1
    effective_n: float  # n / design_effect: the Wilson interval's sample size
    ci_low: float
    ci_high: float


def _as_arrays(followups: object, labelled: object) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(followups, dtype=np.float64)
    m = np.asarray(labelled, dtype=np.float64)
    if y.shape != m.shape or y.ndim != 1:
        raise ValueError("followups and labelled must be 1-d sequences of the same length")
    if np.any(m < 0) or np.any(y < 0) or np.any(y > m):
        raise ValueError("each item needs 0 <= followups <= labelled")
    keep = m > 0
    return y[keep], m[keep]


def clustered_rate(followups: object, labelled: object) -> ClusteredRate | None:
    """Pooled rate sum(followups) / sum(labelled) over items (item i's counts at index i; unlabelled items left
    out), with an item-clustered Wilson interval; None when no item is labelled.

    deff = var_cluster / var_binomial, floored at 1, with var_cluster = sum_i (y_i - p m_i)^2 / n^2 (linearised
    ratio estimator) and var_binomial = p (1 - p) / n. At p = 0 or 1 each item counts once (deff = n / items).
    """
    y, m = _as_arrays(followups, labelled)
    items = len(m)
    if items == 0:
        return None
    n = float(m.sum())
    p = float(y.sum()) / n
    var_binomial = p * (1.0 - p) / n
    if var_binomial <= 0.0:
        deff = n / items
    else:
        var_cluster = math.fsum(((y - p * m) ** 2).tolist()) / (n * n)  # fsum: the same bits in any item order
        deff = max(1.0, var_cluster / var_binomial)
    n_eff = n / deff
    low, high = wilson_interval(p * n_eff, n_eff)  # type: ignore[misc]
    return ClusteredRate(rate=p, n=int(n), items=items, design_effect=deff, effective_n=n_eff,
                         ci_low=low, ci_high=high)


@dataclass(frozen=True)
class ItemTallies:
    """Per-item counts of one condition: `items` (unique ids, sorted), `followups` and `labelled` aligned to them."""

    items: np.ndarray
    followups: np.ndarray
    labelled: np.ndarray

    @classmethod
    def from_mapping(cls, counts: Mapping[Hashable, tuple[int, int]]) -> ItemTallies:
        """From {item id: (followups, labelled)}."""
        ids = sorted(counts)  # type: ignore[type-var]  # ids of one file are all str or all int
        return cls(items=np.array(ids, dtype=object), followups=np.array([counts[i][0] for i in ids], np.int64),
                   labelled=np.array([counts[i][1] for i in ids], np.int64))


class PairedDifference(BaseModel):
    """rate_a - rate_b over the items labelled under both conditions, with a paired item-level 95% interval."""

    delta: float | None
    ci_low: float | None
    ci_high: float | None
    items: int  # items labelled under both
    rate_a: float | None = None  # condition a's rate over those items
    rate_b: float | None = None
    correlation: float | None = None  # item-level correlation of the two rates (0 when undefined)
    correlation_used: float | None = None  # its conservative (Fisher-z lower) limit, used in the interval
    reason: str | None = None  # why delta is null


def _residuals(y: np.ndarray, m: np.ndarray) -> tuple[float, np.ndarray]:
    n = float(m.sum())
    p = float(y.sum()) / n
    return p, (y - p * m) / n


def paired_difference(a: ItemTallies, b: ItemTallies) -> PairedDifference:
    """rate_a - rate_b of two conditions that share items, both over the items labelled under both (null delta
    with a reason when there is none).

    Interval: Newcombe's method 10 with `clustered_rate`'s Wilson intervals and the correlation of the two rates'
    item-level residuals (the phi coefficient at one sample per item; 0 when either is constant), taken at its
    `conservative_correlation`.
    """
    _, ia, ib = np.intersect1d(a.items, b.items, assume_unique=True, return_indices=True)
    ya, ma = a.followups[ia].astype(np.float64), a.labelled[ia].astype(np.float64)
    yb, mb = b.followups[ib].astype(np.float64), b.labelled[ib].astype(np.float64)
    both = (ma > 0) & (mb > 0)
    ya, ma, yb, mb = ya[both], ma[both], yb[both], mb[both]
    if not len(ma):
        return PairedDifference(delta=None, ci_low=None, ci_high=None, items=0,
                                reason="no item is labelled under both conditions")
    ra, rb = clustered_rate(ya, ma), clustered_rate(yb, mb)
    assert ra is not None and rb is not None
    pa, ea = _residuals(ya, ma)
    pb, eb = _residuals(yb, mb)
    ss_a, ss_b = math.fsum((ea * ea).tolist()), math.fsum((eb * eb).tolist())  # fsum: order-independent
    phi = math.fsum((ea * eb).tolist()) / math.sqrt(ss_a * ss_b) if ss_a > 0 and ss_b > 0 else 0.0
    phi = max(-1.0, min(1.0, phi))
    used = conservative_correlation(phi, len(ma))
    d = pa - pb
    la, ua, lb, ub = pa - ra.ci_low, ra.ci_high - pa, pb - rb.ci_low, rb.ci_high - pb
    low = d - math.sqrt(max(0.0, la * la - 2 * used * la * ub + ub * ub))
    high = d + math.sqrt(max(0.0, ua * ua - 2 * used * ua * lb + lb * lb))
    return PairedDifference(delta=d, ci_low=max(-1.0, low), ci_high=min(1.0, high), items=len(ma), rate_a=pa,
                            rate_b=pb, correlation=phi, correlation_used=used)


def conservative_correlation(phi: float, items: int) -> float:
    """The correlation the paired interval uses: a negative estimate as is; a positive one (which narrows the
    interval, and from a few items can be 1 by chance) at the lower end of its 95% Fisher-z interval over `items`
    items, floored at 0 (0 with fewer than 4 items).
    """
    if phi < 0:
        return phi
    if items < 4:
        return 0.0
    lower = math.tanh(math.atanh(min(0.9999, phi)) - Z95 / math.sqrt(items - 3))
    return max(0.0, lower)
