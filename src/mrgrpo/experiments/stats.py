"""Small statistics for seed-level comparisons: means with Student-t 95% intervals, paired differences."""

from __future__ import annotations

import math
from collections.abc import Sequence

# Two-sided 95% Student-t quantiles t_{0.975, df}, df = 1..30, as published (3 decimals; the
# committed results' intervals were computed with them); beyond, computed (t975).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]


def t975(df: int) -> float:
    """The two-sided 95% Student-t quantile ``t_{0.975, df}``: the published 3-decimal value for
    df 1..30 (12.706 ... 2.042), and for larger df the ``t`` whose :func:`t_two_sided_p` is 0.05
    (2.040 at 31, 2.000 at 60, 1.984 at 100, tending to the normal 1.960), by bisection to
    1e-12 (the p-value falls as ``t`` grows). NaN for df < 1."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    low, high = 1.9, 2.1  # the quantile for df > 30 lies in (1.959, 2.042]
    while high - low > 1e-12:
        middle = (low + high) / 2
        if t_two_sided_p(middle, df) > 0.05:
            low = middle
        else:
            high = middle
    return (low + high) / 2


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
    """Paired differences ``a - b`` (same seeds): mean, 95% half-width, how many seeds agree in
    sign, and ``p``, the two-sided paired t-test p-value (:func:`paired_p`; NaN below 2 seeds)."""
    diffs = [float(x) - float(y) for x, y in zip(a, b) if x is not None and y is not None
             and math.isfinite(float(x)) and math.isfinite(float(y))]
    mean, half, n = mean_ci(diffs)
    return {"mean": mean, "ci": half, "n": n, "positive": sum(d > 0 for d in diffs), "negative": sum(d < 0 for d in diffs),
            "p": paired_p(diffs)}


def fmt_ci(mean: float, half: float, digits: int = 3) -> str:
    if not math.isfinite(mean):
        return "—"
    if not math.isfinite(half):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


# --------------------------------------------------------------------------------------------
# p-values and a multiple-comparison correction (Holm), for families of paired comparisons


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """Two-sided p-value of a Student-t statistic: P(|T_df| >= |t|) = I_{df/(df+t²)}(df/2, 1/2)."""
    if df < 1 or not math.isfinite(t):
        return math.nan if df < 1 or math.isnan(t) else 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def paired_p(diffs: Sequence[float | None]) -> float:
    """Two-sided p-value of the one-sample t-test of mean 0 on the finite paired differences
    (NaN with fewer than 2 values; 0 differences all equal and nonzero give p = 0, all zero p = 1)."""
    kept = [float(v) for v in diffs if v is not None and math.isfinite(float(v))]
    n = len(kept)
    if n < 2:
        return math.nan
    mean = sum(kept) / n
    var = sum((v - mean) ** 2 for v in kept) / (n - 1)
    if var == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    return t_two_sided_p(mean / math.sqrt(var / n), n - 1)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control), in the input order.

    Sorted ascending, ``p_(i)`` becomes ``max_{j <= i} min(1, (m − j + 1) · p_(j))`` with ``m``
    the number of finite p-values; a hypothesis is rejected at level α when its adjusted value
    is ≤ α. NaN entries stay NaN and do not count in ``m``.
    """
    finite = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m = len(finite)
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def holm_family(table: dict[str, dict[str, dict[str, float]]]) -> int:
    """Holm-adjust, in place, every cell ``table[row][column]["p"]`` of one family of
    comparisons (e.g. all estimators × objectives of one paired table), adding ``"p_holm"``.
    Returns the family size (cells with a finite p)."""
    cells = [cell for row in table.values() for cell in row.values()]
    adjusted = holm([float(cell.get("p", math.nan)) for cell in cells])
    for cell, value in zip(cells, adjusted):
        cell["p_holm"] = value
    return sum(math.isfinite(v) for v in adjusted)
