"""Small statistics for seed-level comparisons: means with Student-t 95% intervals, paired differences."""

from __future__ import annotations

import math
from collections.abc import Sequence

# Two-sided 95% Student-t quantiles t_{0.975, df}, df = 1..30 (beyond: the normal 1.96).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]


def t975(df: int) -> float:
    if df < 1:
        return math.nan
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci(values: Sequence[float | None]) -> tuple[float, float, int]:
    """``(mean, half-width of the 95% t interval, n)`` of the finite values (NaN when undefined)."""
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(kept)
    if n == 0:
        return math.nan, math.nan, 0
    mean = sum(kept) / n
    if n == 1:
        return mean, math.nan, 1
    var = sum((v - mean) ** 2 for v in kept) / (n - 1)
    return mean, t975(n - 1) * math.sqrt(var / n), n


def paired(a: Sequence[float | None], b: Sequence[float | None]) -> dict[str, float | int]:
    """Paired differences ``a - b`` (same seeds): mean, 95% half-width, and how many seeds agree in sign."""
    diffs = [float(x) - float(y) for x, y in zip(a, b) if x is not None and y is not None
             and math.isfinite(float(x)) and math.isfinite(float(y))]
    mean, half, n = mean_ci(diffs)
    return {"mean": mean, "ci": half, "n": n, "positive": sum(d > 0 for d in diffs), "negative": sum(d < 0 for d in diffs)}


def fmt_ci(mean: float, half: float, digits: int = 3) -> str:
    if not math.isfinite(mean):
        return "—"
    if not math.isfinite(half):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"
