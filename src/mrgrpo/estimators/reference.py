"""Slow, obviously-correct per-group loop implementations: oracles for tests and benchmarks.

Each function walks a dict from group id to row indices, as verl's reference GRPO does, and
computes the estimator with plain numpy on one group at a time. They follow the same
conventions as the vectorized estimators (NaN ignored per component, constant groups give 0,
all-NaN rows get 0 and are left out of batch statistics) but share no code with them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np


def rows_by_group(group_ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for row, gid in enumerate(group_ids):
        groups[gid].append(row)
    return groups


def _std(x: np.ndarray, ddof: int) -> float:
    return float(np.std(x, ddof=ddof)) if x.size > ddof else 0.0


def _z(x: np.ndarray, ddof: int, eps: float) -> np.ndarray:
    """z-scores of the non-NaN values of one component in one group; 0 where NaN or constant."""
    out = np.zeros_like(x)
    seen = ~np.isnan(x)
    values = x[seen]
    if values.size == 0 or np.all(values == values[0]):
        return out
    out[seen] = (values - values.mean()) / (_std(values, ddof) + eps)
    return out


def _batch_norm(s: np.ndarray, scored: np.ndarray, ddof: int, eps: float) -> np.ndarray:
    out = np.zeros_like(s)
    kept = s[scored]
    if kept.size == 0 or np.all(kept == kept[0]):
        return out
    out[scored] = (kept - kept.mean()) / (_std(kept, ddof) + eps)
    return out


def grpo(rewards, group_ids, weights=None, scale="group", eps=1e-4, ddof=1) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    weights = np.ones(rewards.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    scored = ~np.isnan(rewards).all(axis=1)
    total = np.nansum(rewards * weights, axis=1)
    batch_std = _std(total[scored], ddof)
    out = np.zeros(len(total))
    for rows in rows_by_group(group_ids).values():
        rows = [r for r in rows if scored[r]]
        t = total[rows]
        if len(rows) < 2 or np.all(t == t[0]):
            continue
        centered = t - t.mean()
        if scale == "group":
            centered = centered / (_std(t, ddof) + eps)
        elif scale == "batch":
            centered = centered / (batch_std + eps)
        out[rows] = centered
    return out


def gdpo(rewards, group_ids, weights=None, eps=1e-4, ddof=1, batch_norm=True, coefficients=None) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    k = rewards.shape[1]
    weights = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    coefficients = weights if coefficients is None else coefficients
    scored = ~np.isnan(rewards).all(axis=1)
    summed = np.zeros(len(rewards))
    for rows in rows_by_group(group_ids).values():
        for j in range(k):
            summed[rows] += coefficients[j] * _z(rewards[rows, j], ddof, eps)
    return _batch_norm(summed, scored, ddof, eps) if batch_norm else np.where(scored, summed, 0.0)


def _saturation_coefficients(rewards, weights, reward_ranges, gamma) -> np.ndarray:
    coefficients = np.zeros(len(weights))
    for j, (lo, hi) in enumerate(reward_ranges):
        column = rewards[:, j][~np.isnan(rewards[:, j])]
        s = 0.0 if column.size == 0 else min(max((column.mean() - lo) / (hi - lo), 0.0), 1.0)
        coefficients[j] = weights[j] * (1.0 if gamma == 0 else (1.0 - s) ** gamma)
    return coefficients


def sa_mrpo(rewards, group_ids, weights=None, reward_ranges=None, gamma=0.5, eps=1e-4, ddof=1, batch_norm=True):
    rewards = np.asarray(rewards, dtype=np.float64)
    k = rewards.shape[1]
    weights = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    coefficients = _saturation_coefficients(rewards, weights, reward_ranges, gamma)
    return gdpo(rewards, group_ids, weights, eps, ddof, batch_norm, coefficients)


def corr_grpo(rewards, group_ids, weights=None, eps=1e-6) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    k = rewards.shape[1]
    weights = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    out = np.zeros(len(rewards))
    for rows in rows_by_group(group_ids).values():
        block = rewards[rows]
        centered = np.zeros_like(block)
        for j in range(k):
            seen = ~np.isnan(block[:, j])
            values = block[seen, j]
            if values.size and not np.all(values == values[0]):
                centered[seen, j] = values - values.mean()  # missing entries: mean-imputed (0)
        weighted = centered * weights
        rho = np.zeros((k, k))
        for l in range(k):
            for m in range(k):
                denominator = np.sqrt((weighted[:, l] ** 2).sum() * (weighted[:, m] ** 2).sum())
                if denominator > 0:
                    rho[l, m] = (weighted[:, l] * weighted[:, m]).sum() / denominator
        numerator = weighted.sum(axis=1)
        out[rows] = numerator / np.sqrt(max(rho.sum(), 0.0) + eps) if np.any(numerator) else 0.0
    return out


def sa_corr_grpo(rewards, group_ids, weights=None, reward_ranges=None, gamma=0.5, eps=1e-6) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    k = rewards.shape[1]
    weights = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    coefficients = _saturation_coefficients(rewards, weights, reward_ranges, gamma)
    return corr_grpo(rewards, group_ids, coefficients, eps)


REFERENCES = {
    "grpo": grpo,
    "dr_grpo": lambda rewards, group_ids, weights=None: grpo(rewards, group_ids, weights, scale="none"),
    "gdpo": gdpo,
    "sa_mrpo": sa_mrpo,
    "corr_grpo": corr_grpo,
    "sa_corr_grpo": sa_corr_grpo,
}
