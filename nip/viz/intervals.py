"""Confidence intervals for proportions (accuracy over a batch of dialogues)."""

from __future__ import annotations

import math
from statistics import NormalDist


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval for a proportion of ``successes`` out of ``n``.

    Unlike the normal approximation it stays inside [0, 1] and is sensible for small ``n``
    and for proportions near 0 or 1 (the usual case for a verifier's accuracy).

    Args:
        successes: How many trials succeeded (0 to ``n``).
        n: How many trials.
        confidence: The interval's coverage.

    Returns:
        ``(low, high)``; ``(nan, nan)`` when ``n`` is 0.

    Raises:
        ValueError: ``successes`` is outside [0, n] or ``confidence`` outside (0, 1).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n={n}], got {successes}")
    if n == 0:
        return (math.nan, math.nan)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))
