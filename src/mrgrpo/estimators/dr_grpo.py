"""Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", arXiv 2503.20783)."""

from __future__ import annotations

from torch import Tensor

from mrgrpo.estimators.grpo import grpo
from mrgrpo.estimators.groups import Groups
from mrgrpo.estimators.registry import register_estimator


@register_estimator("dr_grpo", screens_rewards=True, combine="sum_then_normalize", unscaled=True)
def dr_grpo(rewards: Tensor, groups: Groups, weights: Tensor) -> Tensor:
    """Dr. GRPO advantage ``A_i = T_i − mean_g T`` (GRPO without the std division).

    Removes GRPO's per-group std scaling, which up-weights near-constant (too easy or too hard)
    groups. Same as ``grpo`` with ``scale="none"``; ``[N, K]`` -> ``[N]``, no options.
    """
    return grpo(rewards, groups, weights, scale="none")
