"""CoRPO: GRPO's total, centered on the group mean clipped from below by a passing score (arXiv 2511.04439)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError
from mrgrpo.estimators._multi import given, number_option
from mrgrpo.estimators.grpo import grpo, weighted_total
from mrgrpo.estimators.groups import Groups
from mrgrpo.estimators.registry import register_estimator


def check_threshold(threshold: Any) -> float:
    """A finite number or ``-inf``."""
    value = number_option(threshold, "threshold", "corpo", allow_inf=True)
    if value == math.inf:
        raise ConfigError("corpo: threshold must be finite or -inf (which gives dr_grpo), got inf")
    return value


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {"threshold": check_threshold})


@register_estimator("corpo", combine="other", unscaled=True, validate=_validate, example_options={"threshold": 0.5})
def corpo(rewards: Tensor, groups: Groups, weights: Tensor, *, threshold: float) -> Tensor:
    """CoRPO advantage ``A_i = T_i − max(mean_g T, threshold)`` with ``T_i = Σ_k w_k r_ik``.

    CoRPO (arXiv 2511.04439): GRPO's mean baseline lets a
    rollout below the passing score earn a positive advantage in a group that is even worse
    (it is only better than its neighbours); clipping the baseline at the passing score keeps
    every failing rollout's advantage <= 0, so the policy is never pushed toward an answer that
    does not pass. No std division (as Dr. GRPO).

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN components count as 0 in ``T`` (as in
            ``grpo``), a rollout with every component NaN is left out of its group's mean and gets 0.
        groups: the grouping (groups of any size ``G``, in any order).
        weights: ``[K]`` component weights.
        threshold: required, the passing score on the scale of ``T``; ``-inf`` gives exactly
            ``dr_grpo``.

    Returns:
        ``[N]`` in the computing dtype. Applied to every group, a group of one included: its
        baseline is ``max(T, threshold)``, so a lone rollout below the threshold gets
        ``T − threshold < 0`` and one above it gets 0; a constant group above the threshold gets
        0, one below it ``T − threshold``. Computed as ``(T − mean_g T) − max(0, threshold −
        mean_g T)``: the first term is ``dr_grpo``'s (exact zeros for a constant group).
    """
    threshold = check_threshold(threshold)
    centered = grpo(rewards, groups, weights, scale="none")
    if threshold == -math.inf:
        return centered
    total = weighted_total(rewards, weights)
    scored = ~torch.isnan(total)
    sums = groups.sum(torch.where(scored, total, torch.zeros_like(total)))
    count = groups.sum(scored.to(torch.float64))
    mean = sums / count.clamp(min=1)
    lift = torch.where(count > 0, (threshold - mean).clamp(min=0.0), torch.zeros_like(mean))
    advantages = centered - groups.gather(lift).to(centered.dtype)
    return torch.where(scored, advantages, torch.zeros_like(advantages))
