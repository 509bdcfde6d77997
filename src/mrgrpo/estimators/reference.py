"""Slow, obviously-correct per-group loop implementations: oracles for tests and benchmarks.

Each function walks a dict from group id to row indices, as verl's reference GRPO does, and
computes the estimator with plain numpy on one group at a time. They follow the same
conventions as the vectorized estimators (NaN ignored per component, constant groups give 0,
all-NaN rows get 0 and are left out of batch statistics) but share no code with them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np

from mrgrpo.errors import ConfigError


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


# --- the field's estimators (issue definitions), one group at a time -----------------------


def _weights(rewards, weights):
    return np.ones(rewards.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)


def _zscores(rewards, group_ids, eps, ddof) -> np.ndarray:
    """``[N, K]`` per-group, per-component z-scores (0 where NaN or constant)."""
    z = np.zeros_like(rewards)
    for rows in rows_by_group(group_ids).values():
        for j in range(rewards.shape[1]):
            z[rows, j] = _z(rewards[rows, j], ddof, eps)
    return z


def mo_grpo(rewards, group_ids, weights=None, eps=1e-4, ddof=1) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    scored = ~np.isnan(rewards).all(axis=1)
    out = np.zeros(len(rewards))
    for i, row in enumerate(_zscores(rewards, group_ids, eps, ddof)):
        if scored[i]:
            out[i] = sum(w[j] * row[j] for j in range(len(w)))
    return out


def corpo(rewards, group_ids, weights=None, threshold=None) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    scored = ~np.isnan(rewards).all(axis=1)
    total = np.nansum(rewards * w, axis=1)
    out = np.zeros(len(rewards))
    for rows in rows_by_group(group_ids).values():
        rows = [r for r in rows if scored[r]]
        if not rows:
            continue
        t = total[rows]
        if np.all(t == t[0]):  # a constant group (a group of one included): its mean is t[0]
            out[rows] = min(0.0, t[0] - threshold)
        else:
            out[rows] = t - max(t.mean(), threshold)
    return out


def dvao(rewards, group_ids, weights=None, eps=1e-4, ddof=1) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    k = rewards.shape[1]
    out = np.zeros(len(rewards))
    for rows in rows_by_group(group_ids).values():
        block = rewards[rows]
        sigma = np.zeros(k)
        z = np.zeros_like(block)
        for j in range(k):
            values = block[~np.isnan(block[:, j]), j]
            if values.size and not np.all(values == values[0]):
                sigma[j] = _std(values, ddof)
            z[:, j] = _z(block[:, j], ddof, eps)
        denominator = float(np.sum(w * sigma))
        if denominator == 0.0:
            continue
        out[rows] = z @ (w * sigma / denominator)
    return np.where(~np.isnan(rewards).all(axis=1), out, 0.0)


def _whiten(values, kept, ddof, eps) -> np.ndarray:
    """``(v − mean)/(std + eps)`` over the ``kept`` entries, 0 elsewhere (0 if they are all equal)."""
    return _batch_norm(values, kept, ddof, eps)


def gd2po(rewards, group_ids, weights=None, mode="snr", tau=0.8, eps=1e-6, ddof=1) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    tau = min(max(tau, 0.0), 1.0)
    scored = ~np.isnan(rewards).all(axis=1)
    u = _zscores(rewards, group_ids, eps, ddof) * w
    kept = np.zeros(len(rewards), dtype=bool)
    summed = np.zeros(len(rewards))
    for i in range(len(rewards)):
        summed[i] = u[i].sum()
        conflict = bool(np.any(u[i] > 1e-8) and np.any(u[i] < -1e-8))
        if mode == "snr" and conflict:
            conflict = abs(summed[i]) / (np.abs(u[i]).sum() + 1e-8) < tau
        kept[i] = scored[i] and not conflict
    values = np.zeros(len(rewards))
    for rows in rows_by_group(group_ids).values():
        members = [r for r in rows if scored[r]]
        if not members:
            continue
        ratio = sum(kept[r] for r in members) / len(members)
        for r in members:
            if kept[r]:
                values[r] = summed[r] * ratio
    if kept.sum() < 2:
        return np.zeros(len(rewards))
    return _whiten(values, kept, ddof, eps)


def _saw_omega(rewards, reward_mins, delta) -> np.ndarray:
    k = rewards.shape[1]
    cv = np.zeros(k)
    for j in range(k):
        column = rewards[~np.isnan(rewards[:, j]), j]
        if column.size < 2:
            continue
        low = column.min() if reward_mins is None else reward_mins[j]
        shifted = column - low
        cv[j] = np.std(shifted, ddof=1) / (abs(shifted.mean()) + delta)
    if cv.sum() == 0:
        return np.ones(k)
    return k * cv / (cv.sum() + delta)


def saw(rewards, group_ids, weights=None, mode="grpo", reward_mins=None, delta=1e-8, eps=1e-4, ddof=1) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights) * _saw_omega(rewards, reward_mins, delta)
    if mode == "grpo":
        return grpo(rewards, group_ids, w, eps=eps, ddof=ddof)
    return gdpo(rewards, group_ids, w, eps=eps, ddof=ddof)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + np.exp(-x))


def _floored_z(values: np.ndarray) -> np.ndarray:
    sigma = max(float(np.std(values)), 1e-8)
    return (values - values.mean()) / (sigma + 1e-8)


def ddca(rewards, group_ids, weights=None, correctness=0, length=1, beta=0.2, component_names=None) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    if isinstance(correctness, str):
        correctness = component_names.index(correctness)
    if isinstance(length, str):
        length = component_names.index(length)
    out = np.zeros(len(rewards))
    for rows in rows_by_group(group_ids).values():
        rows = [r for r in rows if not np.isnan(rewards[r, correctness])]
        if not rows:
            continue
        correct = np.array([rewards[r, correctness] > 0.5 for r in rows], dtype=np.float64)
        accuracy = _floored_z(correct)
        timed = [i for i, r in enumerate(rows) if correct[i] and not np.isnan(rewards[r, length])]
        length_term = np.zeros(len(rows))
        if timed:
            z = _floored_z(np.array([rewards[rows[i], length] for i in timed]))
            s = np.array([_sigmoid(min(max(v, -20.0), 20.0)) for v in z])
            for i, si in zip(timed, s):
                length_term[i] = -(si - s.mean()) * correct.sum() / len(rows)
        for i, r in enumerate(rows):
            out[r] = accuracy[i] + beta * length_term[i]
    return out


def constrained_grpo(
    rewards, group_ids, weights=None, constraints=None, limits=None, lr=0.01, init=0.0, multipliers=None,
    eps=1e-4, ddof=1, component_names=None,
) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    specs = [constraints] if isinstance(constraints, (int, str)) else list(constraints)
    costs = [component_names.index(c) if isinstance(c, str) else c % rewards.shape[1] for c in specs]
    if multipliers is None:
        multipliers = [init] * len(costs) if np.isscalar(init) else list(init)
    others = [j for j in range(rewards.shape[1]) if j not in costs]
    out = np.zeros(len(rewards))
    if others:
        out += grpo(rewards[:, others], group_ids, w[others], eps=eps, ddof=ddof)
    for lam, c in zip(multipliers, costs):
        for rows in rows_by_group(group_ids).values():
            out[rows] -= lam * _z(rewards[rows, c], ddof, eps)
    return np.where(~np.isnan(rewards).all(axis=1), out, 0.0)


def update_multipliers(multipliers, rewards, costs, limits, lr) -> list[float]:
    """``λ_c ← max(0, λ_c + lr · (mean_batch C_c − limit_c))`` (column indices ``costs``)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    new = []
    for lam, c, limit in zip(multipliers, costs, limits):
        column = rewards[~np.isnan(rewards[:, c]), c]
        new.append(lam if column.size == 0 else max(0.0, lam + lr * (column.mean() - limit)))
    return new



def rvpo(rewards, group_ids, weights=None, kappa=1.0, eps=1e-6, ddof=1, batch_norm=True) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    z = _zscores(rewards, group_ids, eps, ddof)
    scored = ~np.isnan(rewards).all(axis=1)
    out = np.zeros(len(rewards))
    for i in range(len(rewards)):
        used = [k for k in range(rewards.shape[1]) if not np.isnan(rewards[i, k]) and w[k] > 0]
        if not used:
            continue
        p = w[used] / w[used].sum()
        if kappa <= 0:
            out[i] = float(p @ z[i, used])
        else:  # −(1/κ) log Σ p exp(−κ z), with the largest exponent taken out
            exponents = np.log(p) - kappa * z[i, used]
            top = exponents.max()
            out[i] = -(top + np.log(np.exp(exponents - top).sum())) / kappa
    return _whiten(out, scored, ddof, eps) if batch_norm else out


def _others_baseline_std(values: list[float], leave_one_out: bool) -> list[tuple[float, float]]:
    """(baseline, std) for each of one group's scored values of one component: the mean and
    unbiased std of the other values (or of all of them); std 0 for fewer than two, or equal ones."""
    out = []
    for i in range(len(values)):
        pool = [v for j, v in enumerate(values) if j != i] if leave_one_out else list(values)
        shift = pool[0]
        deviations = np.array([v - shift for v in pool])  # (relative to a member: exact for close values)
        mean = shift + deviations.mean()
        if len(pool) < 2 or all(v == pool[0] for v in pool):
            out.append((mean, 0.0))
        else:
            out.append((mean, float(np.std(deviations, ddof=1))))
    return out


def gdpo_loo(rewards, group_ids, weights=None, leave_one_out=True, eps=1e-6, batch_norm=True) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    scored = ~np.isnan(rewards).all(axis=1)
    out = np.zeros(len(rewards))
    for rows in rows_by_group(group_ids).values():
        for k in range(rewards.shape[1]):
            seen = [r for r in rows if not np.isnan(rewards[r, k])]
            if len(seen) < 2:
                continue
            values = [float(rewards[r, k]) for r in seen]
            for r, x, (baseline, std) in zip(seen, values, _others_baseline_std(values, leave_one_out)):
                a = x - baseline
                out[r] += w[k] * (a / (std + eps) if std > 0 else a)
    if not batch_norm:
        return np.where(scored, out, 0.0)
    return _whiten(out, scored, 1, 0.0)


def _ctwa_targets(value, k, default):
    if value is None:  # the official config's: its first value for component 0, its second for the rest
        return [default[0]] + [default[1]] * (k - 1)
    return [float(value)] * k if np.isscalar(value) else [float(v) for v in value]


def ctwa_advantages(rewards, group_ids, weights, base="reinforce_pp") -> np.ndarray:
    """CTWA's step advantages with the given (current) weights: ``T_i = Σ w_k r_ik`` (NaN 0),
    then ``(T − mean)/sqrt(var + 1e-8)`` over the scored rollouts (unbiased var) or grpo's
    group z-score with eps 1e-6."""
    rewards = np.asarray(rewards, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if base == "grpo":
        return grpo(rewards, group_ids, w, eps=1e-6)
    scored = ~np.isnan(rewards).all(axis=1)
    totals = [sum(w[k] * rewards[i, k] for k in range(rewards.shape[1]) if not np.isnan(rewards[i, k]))
              for i in range(len(rewards))]
    kept = [t for t, ok in zip(totals, scored) if ok]
    out = np.zeros(len(rewards))
    if kept:
        mean = sum(kept) / len(kept)
        var = sum((t - mean) ** 2 for t in kept) / (len(kept) - 1) if len(kept) > 1 else 0.0
        for i, ok in enumerate(scored):
            if ok:
                out[i] = (totals[i] - mean) / np.sqrt(var + 1e-8)
    return out


def ctwa_signal(advantages, old_log_probs, new_log_probs, mask, clip_low, clip_high, w_agg="mean") -> np.ndarray:
    """The official ``compute_ctwa_stats``' completion weight, token by token: ``Â_i`` the mean
    of row i's token ``advantages`` over its ``mask``, ``W_t = Â_i·ρ_t·1[unclipped]`` with ``ρ_t =
    exp(clip(new − old, −20, 20))`` and the clip test of the sign of ``Â_i``; ``w_agg``:
    ``"mean"`` ``Σ W / tokens`` (0 without tokens, where the source gets 0/0 and drops the row),
    ``"mean_unclipped"`` ``Σ W / (unclipped tokens + 1e-8)``, ``"sum"`` ``Σ W``. All inputs
    ``(N, T)`` array-likes."""
    out = []
    for a_row, o_row, n_row, m_row in zip(*(np.asarray(x, dtype=np.float64).tolist() for x in (advantages, old_log_probs, new_log_probs, mask))):
        tokens = sum(1 for m in m_row if m)
        a = sum(x for x, m in zip(a_row, m_row) if m) / tokens if tokens else 0.0
        total, unclipped_count = 0.0, 0
        for o, n, m in zip(o_row, n_row, m_row):
            if not m:
                continue
            ratio = math.exp(min(max(n - o, -20.0), 20.0))
            unclipped = ratio <= 1 + clip_high if a >= 0 else ratio >= 1 - clip_low
            total += a * ratio * float(unclipped)
            unclipped_count += int(unclipped)
        if w_agg == "mean":
            out.append(total / tokens if tokens else 0.0)
        elif w_agg == "mean_unclipped":
            out.append(total / (unclipped_count + 1e-8))
        elif w_agg == "sum":
            out.append(total)
        else:
            raise ConfigError(f"w_agg must be mean, mean_unclipped or sum, got {w_agg!r}")
    return np.array(out)


def ctwa_statistics(rewards, group_ids, signal, global_metrics=False) -> dict:
    """``compute_ctwa_stats`` of the official code, transcribed as loops: drop non-finite ``s``
    and ``|s| > 100·median|s|``; per group of >= 2 kept rows (per component, the rows that
    scored it) the population covariance and correlation (counted where ``std_u·std_s >
    1e-8``), averaged over groups; ``global_metrics``: the centred products pooled over those
    groups' rows instead (covariance and the pooled stds' correlation)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    s = np.asarray(signal, dtype=np.float64)
    finite = np.isfinite(s)
    median = float(np.median(np.abs(s[finite]))) if finite.any() else 0.0
    keep = finite & (np.abs(s) <= 100.0 * median) if median > 0 else finite
    k_count = rewards.shape[1]
    cov_sum, corr_sum, corr_cnt, n_groups = np.zeros(k_count), np.zeros(k_count), np.zeros(k_count), np.zeros(k_count)
    cross, u2, w2, n_rows = np.zeros(k_count), np.zeros(k_count), np.zeros(k_count), np.zeros(k_count)
    for rows in rows_by_group(group_ids).values():
        for k in range(k_count):
            used = [r for r in rows if keep[r] and not np.isnan(rewards[r, k])]
            if len(used) < 2:
                continue
            u = np.array([rewards[r, k] for r in used])
            v = np.array([s[r] for r in used])
            uc, vc = u - u.mean(), v - v.mean()
            cross[k] += float(np.sum(uc * vc))
            u2[k] += float(np.sum(uc * uc))
            w2[k] += float(np.sum(vc * vc))
            n_rows[k] += len(used)
            cov = float(np.mean(uc * vc))
            n_groups[k] += 1
            cov_sum[k] += cov
            denominator = float(np.std(uc)) * float(np.std(vc))
            if denominator > 1e-8:
                corr_sum[k] += cov / denominator
                corr_cnt[k] += 1
    objective = []
    for k in range(k_count):
        column = rewards[~np.isnan(rewards[:, k]), k]
        objective.append(float(column.mean()) if column.size else np.nan)
    if global_metrics:
        cov = [c / n if n else 0.0 for c, n in zip(cross, n_rows)]
        corr = []
        for k in range(k_count):
            spread = np.sqrt(u2[k] / n_rows[k]) * np.sqrt(w2[k] / n_rows[k]) if n_rows[k] else 0.0
            corr.append(cov[k] / spread if spread > 1e-8 else 0.0)
        return {"cov": cov, "corr": corr, "objective_mean": objective}
    return {
        "cov": [c / n if n else 0.0 for c, n in zip(cov_sum, n_groups)],
        "corr": [c / n if n else 0.0 for c, n in zip(corr_sum, corr_cnt)],
        "objective_mean": objective,
    }


def ctwa_update(log_weights, ema, rewards, group_ids, signal, cov_targets=None,
                obj_targets=None, use_corr_target=False, gate_by_obj_targets=True, ema_tau=0.1,
                lr=0.02, global_metrics=False, w_agg="mean") -> tuple[list[float], list[float]]:
    """One CTWA weight update (the official ``_ctwa_update_weights_from_metrics``), as loops:
    returns the new ``(log_weights, ema)``; ``ema=None`` on the first update. ``w_agg`` is how
    ``signal`` was aggregated (:func:`ctwa_signal`): not used here."""
    stats = ctwa_statistics(rewards, group_ids, signal, global_metrics)
    k_count = len(log_weights)
    targets = _ctwa_targets(cov_targets, k_count, (0.1, 0.05))
    caps = _ctwa_targets(obj_targets, k_count, (1.0, 0.95))
    v = stats["corr"] if use_corr_target else stats["cov"]
    new_ema = list(v) if ema is None else [(1 - ema_tau) * e + ema_tau * x for e, x in zip(ema, v)]
    out = []
    for k in range(k_count):
        gate = 0.0 if gate_by_obj_targets and stats["objective_mean"][k] >= caps[k] else 1.0
        out.append(log_weights[k] + lr * max(targets[k] - new_ema[k], 0.0) * gate)
    return out, new_ema


def ctwa(rewards, group_ids, weights=None, base="reinforce_pp", cov_targets=None,
         obj_targets=None, use_corr_target=False, gate_by_obj_targets=True, ema_tau=0.1,
         lr=0.02, global_metrics=False) -> np.ndarray:
    """CTWA's first step: the base advantages with the initial weights ``max(w/Σw, 1e-8)``."""
    rewards = np.asarray(rewards, dtype=np.float64)
    w = _weights(rewards, weights)
    w = np.maximum(w / w.sum(), 1e-8)
    return ctwa_advantages(rewards, group_ids, np.exp(np.log(w)), base)


REFERENCES = {
    "grpo": grpo,
    "dr_grpo": lambda rewards, group_ids, weights=None: grpo(rewards, group_ids, weights, scale="none"),
    "gdpo": gdpo,
    "sa_mrpo": sa_mrpo,
    "corr_grpo": corr_grpo,
    "sa_corr_grpo": sa_corr_grpo,
    "mo_grpo": mo_grpo,
    "corpo": corpo,
    "dvao": dvao,
    "gd2po": gd2po,
    "saw": saw,
    "ddca": ddca,
    "constrained_grpo": constrained_grpo,
    "rvpo": rvpo,
    "gdpo_loo": gdpo_loo,
    "ctwa": ctwa,
}
