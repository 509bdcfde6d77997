"""DVAO: per-group component weights proportional to each component's spread in the group (arXiv 2605.25604)."""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.estimators._multi import ddof_option, eps_option, given
from mrgrpo.estimators.groups import Groups, group_moments
from mrgrpo.estimators.registry import register_estimator


def spread_weights(sigma: Tensor, weights: Tensor) -> Tensor:
    """``w̃_gk = w_k σ_gk / Σ_l w_l σ_gl`` ``[num_groups, K]`` from the per-group stds ``σ``
    ``[num_groups, K]``; a group whose denominator is exactly 0 (every component constant)
    gets weights 0. Each group's σ is first divided by its largest σ (the ratio is unchanged,
    and nothing overflows)."""
    largest = sigma.amax(dim=1, keepdim=True)
    unit = sigma / torch.where(largest > 0, largest, torch.ones_like(largest))
    numerator = unit * weights.to(unit.dtype)
    denominator = numerator.sum(dim=1, keepdim=True)
    safe = torch.where(denominator != 0, denominator, torch.ones_like(denominator))
    return torch.where(denominator != 0, numerator / safe, torch.zeros_like(numerator))


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {"eps": lambda v: eps_option(v, "dvao"), "ddof": lambda v: ddof_option(v, "dvao")})


@register_estimator("dvao", combine="normalize_then_sum", validate=_validate)
def dvao(rewards: Tensor, groups: Groups, weights: Tensor, *, eps: float = 1e-4, ddof: int = 1) -> Tensor:
    """DVAO advantage ``A_i = Σ_k w̃_gk z_ik`` with ``w̃_gk = w_k σ_gk / Σ_l w_l σ_gl``.

    DVAO (arXiv 2605.25604): ``z_ik = (r_ik − mean_g r_k)/(σ_gk +
    eps)`` as in GDPO, but in each group g the components are weighted in proportion to their
    in-group std ``σ_gk``: a component that barely varies in the group (whose z-scores would
    only amplify noise) gets a small weight, and the weights of a group sum to 1.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored (ignored in that component's
            group statistics, contributes 0).
        groups: the grouping (groups of any size ``G``, in any order).
        weights: ``[K]`` base weights ``w_k``.
        eps: added to ``σ_gk`` in the z-score only (not in the weights); 1e-4 as ``gdpo``.
        ddof: of ``σ_gk`` (z-scores and weights); 1 by default.

    Returns:
        ``[N]`` in the computing dtype, no batch normalization. A group of one, or a group where
        every component is constant, gets exactly 0 (the denominator is 0); a constant
        component gets weight 0. With one component (weight 1) this is ``grpo`` with the same
        ``eps`` and ``ddof``. With weights of mixed signs the denominator can vanish: a group
        where it is exactly 0 gets 0 (use non-negative weights).
    """
    eps = eps_option(eps, "dvao")
    ddof = ddof_option(ddof, "dvao")
    moments = group_moments(rewards, groups)
    std = moments.std(ddof)
    sigma = groups.flat_groups(std if moments.scale is None else std / moments.scale).to(torch.float64)
    coefficients = groups.layout_groups(spread_weights(sigma, weights).to(rewards.dtype))
    # A_i = Σ_k centered_ik · w̃_gk / (σ_gk + eps): one per-group factor, broadcast once
    denominator = std + moments.scaled_eps(eps)
    factor = coefficients / torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    ones = torch.ones(rewards.shape[1], dtype=rewards.dtype, device=rewards.device)
    return groups.combine(moments.centered * groups.spread(factor), ones)
