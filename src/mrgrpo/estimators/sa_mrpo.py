"""SA-MRPO: saturation-aware multi-reward policy optimization.

Down-weights the objectives that the batch already saturates, so the gradient budget goes to
the ones still being learned.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.estimators._checks import check_bool, check_ddof, check_eps, check_gamma, check_reward_ranges
from mrgrpo.estimators.gdpo import componentwise_advantages
from mrgrpo.estimators.groups import Groups, batch_standardize
from mrgrpo.estimators.registry import register_estimator


def saturation(rewards: Tensor, reward_ranges: Tensor) -> Tensor:
    """``s_k = clip((mean_batch r_k − lo_k)/(hi_k − lo_k), 0, 1)`` ``[K]``.

    The batch mean ignores NaN; a component with no scored entry has saturation 0.
    """
    present = ~torch.isnan(rewards)
    count = present.sum(dim=0)
    mean = torch.where(present, rewards, torch.zeros_like(rewards)).sum(dim=0) / count.clamp(min=1)
    lo, hi = reward_ranges[:, 0], reward_ranges[:, 1]
    s = ((mean - lo) / (hi - lo)).clamp(0.0, 1.0)
    return torch.where(count > 0, s, torch.zeros_like(s))


def saturation_coefficients(rewards: Tensor, weights: Tensor, reward_ranges: Tensor, gamma: float) -> Tensor:
    """``coef_k = w_k (1 − s_k)^γ`` ``[K]``, with ``0^0 = 1`` (so ``γ = 0`` gives plain weights)."""
    return weights * torch.pow(1.0 - saturation(rewards, reward_ranges), gamma)


@register_estimator("sa_mrpo")
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
        rewards: ``[N, K]`` float64, NaN = not scored.
        groups, weights: as for every estimator.
        reward_ranges: required, ``K`` pairs ``(lo, hi)`` with ``hi > lo`` (a suite's
            ``reward_ranges``): the saturation scale.
        gamma: focusing exponent ``γ ≥ 0``; 0.5 was best on average in the paper's sweep, its
            worked example uses 1; ``γ = 0`` is exactly GDPO.
        eps, ddof, batch_norm: as in ``gdpo`` (same defaults).

    Returns:
        ``[N]`` float64.
    """
    ranges = check_reward_ranges(reward_ranges, rewards.shape[1], "sa_mrpo").to(rewards.device)
    gamma = check_gamma(gamma, "sa_mrpo")
    eps = check_eps(eps, "sa_mrpo")
    ddof = check_ddof(ddof, "sa_mrpo")
    check_bool(batch_norm, "batch_norm", "sa_mrpo")
    coefficients = saturation_coefficients(rewards, weights, ranges, gamma)
    summed = (componentwise_advantages(rewards, groups, eps, ddof) * coefficients).sum(dim=1)
    if not batch_norm:
        return summed
    return batch_standardize(summed, ~torch.isnan(rewards).all(dim=1), ddof, eps)
