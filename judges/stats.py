"""Binomial confidence intervals for rates."""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # standard normal quantile for a two-sided 95% interval


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval (Wilson 1927) for successes/n; None when n == 0.

    Unlike the normal approximation it stays inside [0, 1] and is informative at 0/n and n/n.
    """
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"successes ({successes}) must be within 0..n ({n})")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
