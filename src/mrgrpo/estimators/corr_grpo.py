"""CorrGRPO: GRPO's centered total, normalized by the sum of the in-group correlation matrix."""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.estimators._checks import check_eps
from mrgrpo.estimators.groups import Groups, group_moments
from mrgrpo.estimators.registry import register_estimator


def correlation_sum(weighted_centered: Tensor, groups: Groups) -> Tensor:
    """``Σ_{l,m} ρ_lm`` per group ``[num_groups]``, ρ the Pearson correlation of the weighted
    components within the group.

    ``weighted_centered`` ``[N, K]`` holds ``c_il = w_l (r_il − mean_g r_l)``. With
    ``z_il = c_il / sqrt(Σ_{i∈g} c_il²)`` (``z = 0`` for a component with zero in-group
    variance or zero weight, which zeroes its row and column, diagonal included; a negative
    weight flips the sign of its correlations), ``ρ_lm = Σ_i z_il z_im`` and so
    ``Σ_{l,m} ρ_lm = Σ_{i∈g} (Σ_l z_il)²``: a sum of squares, never negative, even in
    floating point. ρ is ddof-free (the ``1/(n − ddof)`` factors cancel).
    """
    norm = groups.gather(groups.sum(weighted_centered * weighted_centered).sqrt())
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    row = torch.where(norm > 0, weighted_centered / safe, torch.zeros_like(norm)).sum(dim=1, keepdim=True)
    return groups.sum(row * row).squeeze(1)


@register_estimator("corr_grpo")
def corr_grpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    eps: float = 1e-6,
) -> Tensor:
    """CorrGRPO advantage ``A_i = Σ_l w_l (r_il − mean_g r_l) / sqrt(Σ_{l,m} ρ_lm + eps)``.

    GRPO divides the centered total by ``sqrt(Var T) = sqrt(Σ_{l,m} Cov_lm)``, in which a
    high-variance component dominates; CorrGRPO replaces covariances with correlations so every
    varying component counts 1 on the diagonal whatever its scale. The numerator keeps the
    weighted raw total (the rewards' units), and there is no batch renormalization.

    Args:
        rewards: ``[N, K]`` float64. NaN entries are mean-imputed: their centered value is 0,
            both in the numerator and in the correlations.
        groups, weights: as for every estimator; a negative weight flips the sign of that
            component's correlations.
        eps: added inside the square root (paper: 1e-6).

    Returns:
        ``[N]`` float64; sums to 0 within every group. A group of one rollout, or with every
        component constant, gives exact zeros.

    Example (paper Figure 2): ρ12 = 0.9756, ρ13 = ρ23 = 0.1098, scale 1/sqrt(5.3904) = 0.4307.
    """
    eps = check_eps(eps, "corr_grpo")
    centered = group_moments(rewards, groups).centered
    weighted = centered * weights
    numerator = weighted.sum(dim=1)
    denominator = (groups.gather(correlation_sum(weighted, groups)) + eps).sqrt()
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    return torch.where(numerator != 0, numerator / safe, torch.zeros_like(numerator))
