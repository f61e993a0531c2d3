"""Confidence intervals for proportions (accuracy over a batch of dialogues)."""

from __future__ import annotations

import math
from statistics import NormalDist


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` of ``successes`` out of ``n`` (``nan`` for 0).

    It stays inside [0, 1] and suits small ``n``; ``ValueError`` for ``successes`` outside
    [0, n] or ``confidence`` outside (0, 1).
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


def _t_cdf(x: float, df: int) -> float:
    """Student's t distribution function (Simpson's rule on its density; ``x`` >= 0)."""
    scale = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    steps = 2000
    width = x / steps
    total = 0.0
    for k in range(steps + 1):
        weight = 1 if k in (0, steps) else (4 if k % 2 else 2)
        total += weight * (1 + (k * width) ** 2 / df) ** (-(df + 1) / 2)
    return 0.5 + scale * total * width / 3


def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile (> 0.5) of Student's t with ``df`` degrees of freedom."""
    low, high = 0.0, 1000.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_cdf(middle, df) < probability else (low, middle)
    return (low + high) / 2


def seed_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of per-seed values and their Student-t interval, clipped to [0, 1]
    (``nan`` for fewer than two values): how much the result varies between seeds."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = sum(values) / n
    if n < 2:
        return (mean, math.nan, math.nan)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return (mean, max(0.0, mean - half), min(1.0, mean + half))
