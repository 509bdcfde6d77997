"""GRPO: sum the weighted components, then normalize within the group.

Shao et al. 2024 (DeepSeekMath), as implemented by TRL 1.16 ``multi_objective_aggregation=
"sum_then_normalize"``; ``scale="none"`` is Dr. GRPO (Liu et al. 2025, arXiv 2503.20783).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.estimators._checks import check_choice, check_ddof, check_eps
from mrgrpo.estimators.groups import Groups, group_moments, standardize
from mrgrpo.estimators.registry import register_estimator

SCALES = ("group", "batch", "none")


def weighted_total(rewards: Tensor, weights: Tensor) -> Tensor:
    """``T_i = Σ_k w_k r_ik`` ``[N]``; NaN components count as 0 (TRL's ``nansum``), and a row
    with every component NaN stays NaN so group statistics skip it."""
    total = torch.nan_to_num(rewards, nan=0.0) @ weights  # inputs hold no ±inf (validated)
    return total.masked_fill_(torch.isnan(rewards).all(dim=1), float("nan"))


@register_estimator("grpo")
def grpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    scale: str = "group",
    eps: float = 1e-4,
    ddof: int = 1,
) -> Tensor:
    """GRPO advantage ``A_i = (T_i − mean_g T) / (std T + eps)``, with ``T = Σ_k w_k r_k``.

    Args:
        rewards: ``[N, K]`` float64, NaN = not scored (counts as 0 in ``T``).
        groups: group of each rollout.
        weights: ``[K]``.
        scale: ``"group"`` — std of ``T`` within the group (default, TRL's ``scale_rewards=
            "group"``); ``"batch"`` — std of ``T`` over all scored rollouts of the batch (TRL's
            ``"batch"``; the mean stays per group); ``"none"`` — no division (Dr. GRPO).
        eps: added to the std (not under a square root); TRL uses 1e-4.
        ddof: delta degrees of freedom of the std; 1 (unbiased, ``torch.std``) matches TRL.

    Returns:
        ``[N]`` float64. A group of one rollout, or whose total is constant, gives exact zeros.
    """
    check_choice(scale, "scale", SCALES, "grpo")
    eps = check_eps(eps, "grpo")
    ddof = check_ddof(ddof, "grpo")
    total = weighted_total(rewards, weights)
    moments = group_moments(total.unsqueeze(1), groups)
    centered = moments.centered.squeeze(1)
    if scale == "none":
        return centered
    if scale == "group":
        std = groups.gather(moments.std(ddof)).squeeze(1)
    else:
        kept = total[~torch.isnan(total)]
        n = kept.numel()
        var = ((kept - kept.mean()) ** 2).sum() / (n - ddof) if n > ddof else kept.new_zeros(())
        std = var.sqrt().expand_as(centered)
    return standardize(centered, std, eps)
