"""MO-GRPO: per-component group normalization, summed, without GDPO's batch step (arXiv 2509.22047)."""

from __future__ import annotations

from torch import Tensor

from mrgrpo.estimators._multi import ddof_option, eps_option, given
from mrgrpo.estimators.gdpo import summed_zscores
from mrgrpo.estimators.groups import Groups
from mrgrpo.estimators.registry import register_estimator


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {"eps": lambda v: eps_option(v, "mo_grpo"), "ddof": lambda v: ddof_option(v, "mo_grpo")})


@register_estimator("mo_grpo", combine="normalize_then_sum", validate=_validate)
def mo_grpo(rewards: Tensor, groups: Groups, weights: Tensor, *, eps: float = 1e-4, ddof: int = 1) -> Tensor:
    """MO-GRPO advantage ``A_i = Σ_k w_k (r_ik − mean_g r_k)/(std_g r_k + eps)``.

    MO-GRPO (arXiv 2509.22047): each component is normalized
    within its group before the weighted sum, so no component dominates the sum through its
    scale or variance (the reward hacking of a high-variance component that the paper shows for
    GRPO's summed reward). It is GDPO's ``S`` before GDPO's batch normalization.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored (ignored in the group
            statistics of that component, contributes 0).
        groups: the grouping of the N rollouts (groups of any size ``G``, in any order).
        weights: ``[K]`` component weights ``w_k``.
        eps: added to each group std (after the square root); mrgrpo's ``gdpo`` default 1e-4.
        ddof: of the group std; 1 (unbiased, TRL's) by default.

    Returns:
        ``[N]`` in the computing dtype. A component constant within its group (a group of one
        included) contributes exactly 0; a rollout with every component NaN gets 0. Equals
        ``gdpo(batch_norm=False)`` with the same ``eps`` and ``ddof``. The paper writes the
        population std and no eps; ``ddof=0, eps=0`` gives that form.
    """
    eps = eps_option(eps, "mo_grpo")
    ddof = ddof_option(ddof, "mo_grpo")
    return summed_zscores(rewards, groups, weights, eps, ddof, batch_norm=False)
