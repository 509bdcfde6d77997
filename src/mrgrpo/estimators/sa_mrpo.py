"""SA-MRPO: saturation-aware multi-reward policy optimization.

Down-weights the objectives that the batch already saturates, so the gradient budget goes to
the ones still being learned.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.estimators._checks import check_bool, check_ddof, check_eps, check_gamma, check_given, check_reward_ranges
from mrgrpo.estimators.gdpo import summed_zscores
from mrgrpo.estimators.groups import Groups, column_sums64
from mrgrpo.estimators.registry import register_estimator


def saturation(rewards: Tensor, reward_ranges: Tensor) -> Tensor:
    """``s_k = clip((mean_batch r_k − lo_k)/(hi_k − lo_k), 0, 1)`` ``[K]`` float64.

    The batch mean ignores NaN; a component with no scored entry has saturation 0. Computed in
    float64 on halves (``mean/2 − lo/2`` over ``hi/2 − lo/2``) so no finite input overflows.
    """
    n = rewards.shape[0]
    half_mean = column_sums64(rewards) * (0.5 / max(n, 1))
    count = torch.full_like(half_mean, float(n))
    if not bool(torch.isfinite(half_mean).all()):  # NaN entries, or sums beyond float64
        values = rewards.to(torch.float64)
        present = ~torch.isnan(values)
        count = present.sum(dim=0).to(torch.float64)
        share = torch.where(present, values, torch.zeros_like(values)) / count.clamp(min=1)
        half_mean = (share * 0.5).sum(dim=0)
    lo, hi = reward_ranges[:, 0], reward_ranges[:, 1]
    s = ((half_mean - lo * 0.5) / (hi * 0.5 - lo * 0.5)).clamp(0.0, 1.0)
    return torch.where(count > 0, s, torch.zeros_like(s))


def saturation_coefficients(rewards: Tensor, weights: Tensor, reward_ranges: Tensor, gamma: float) -> Tensor:
    """``coef_k = w_k (1 − s_k)^γ`` ``[K]``, with ``0^0 = 1`` (so ``γ = 0`` gives plain weights)."""
    return weights * torch.pow(1.0 - saturation(rewards, reward_ranges), gamma)


def _check_sa_mrpo_options(options: dict[str, Any], num_components: int | None) -> None:
    # (reward_ranges: checked by the registry, which knows this estimator needs them)
    check_given(
        options, "sa_mrpo", gamma=check_gamma, eps=check_eps, ddof=check_ddof,
        batch_norm=lambda v, e: check_bool(v, "batch_norm", e),
    )


@register_estimator(
    "sa_mrpo", combine="normalize_then_sum", batch_norm=True, needs_ranges=True, validate=_check_sa_mrpo_options
)
def sa_mrpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    reward_ranges: Any = None,
    gamma: float = 0.5,
    eps: float = 1e-4,
    ddof: int = 1,
    batch_norm: bool = True,
) -> Tensor:
    """SA-MRPO advantage: GDPO's per-component z-scores, weighted by how unsaturated each is.

    ``s_k = clip((mean_batch r_k − lo_k)/(hi_k − lo_k), 0, 1)``,
    ``S_i = Σ_k w_k (1 − s_k)^γ · (r_ik − mean_g r_k)/(std_g r_k + eps)``, then
    ``A = (S − mean_batch S)/(std_batch S + eps)`` when ``batch_norm``.

    Args:
        rewards: ``[N, K]`` float32 or float64, NaN = not scored.
        groups, weights: as for every estimator.
        reward_ranges: required, ``K`` pairs ``(lo, hi)`` with ``hi > lo`` (a suite's
            ``reward_ranges``): the saturation scale.
        gamma: focusing exponent ``γ ≥ 0``; 0.5 was best on average in the paper's sweep, its
            worked example uses 1; ``γ = 0`` is exactly GDPO.
        eps, ddof, batch_norm: as in ``gdpo`` (same defaults).

    Returns:
        ``[N]`` in the computing dtype.
    """
    ranges = check_reward_ranges(reward_ranges, rewards.shape[1], "sa_mrpo").to(rewards.device)
    gamma = check_gamma(gamma, "sa_mrpo")
    eps = check_eps(eps, "sa_mrpo")
    ddof = check_ddof(ddof, "sa_mrpo")
    check_bool(batch_norm, "batch_norm", "sa_mrpo")
    coefficients = saturation_coefficients(rewards, weights, ranges, gamma)
    return summed_zscores(rewards, groups, coefficients, eps, ddof, batch_norm)
