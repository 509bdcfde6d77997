"""GDPO: normalize each reward component within the group, then sum (arXiv 2601.05242)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.estimators._checks import check_bool, check_ddof, check_eps, check_given
from mrgrpo.estimators.groups import Groups, batch_standardize, group_moments
from mrgrpo.estimators.registry import register_estimator


def componentwise_advantages(rewards: Tensor, groups: Groups, eps: float, ddof: int) -> tuple[Tensor, bool]:
    """Per-component in-group z-scores ``A_ik = (r_ik − mean_g r_k) / (std_g r_k + eps)``, in the
    layout of ``groups`` (see :meth:`Groups.rows`), and whether any entry was NaN.

    NaN entries and components constant within a group give exact zeros.
    """
    moments = group_moments(rewards, groups)
    return moments.zscores(eps, ddof), moments.present is not None


def summed_zscores(
    rewards: Tensor, groups: Groups, coefficients: Tensor, eps: float, ddof: int, batch_norm: bool
) -> Tensor:
    """``S_i = Σ_k c_k A_ik`` ``[N]``, batch-normalized over the scored rows when ``batch_norm``
    (shared by ``gdpo`` and ``sa_mrpo``)."""
    z, has_nan = componentwise_advantages(rewards, groups, eps, ddof)
    summed = groups.combine(z, coefficients.to(z.dtype))
    if not batch_norm:
        return summed
    scored = ~torch.isnan(rewards).all(dim=1) if has_nan else None
    return batch_standardize(summed, scored, ddof, eps)


def _check_gdpo_options(options: dict[str, Any], num_components: int | None) -> None:
    check_given(
        options, "gdpo", eps=check_eps, ddof=check_ddof, batch_norm=lambda v, e: check_bool(v, "batch_norm", e)
    )


@register_estimator(
    "gdpo", combine="normalize_then_sum", batch_norm=True, trl_default="normalize_then_sum", validate=_check_gdpo_options
)
def gdpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    eps: float = 1e-4,
    ddof: int = 1,
    batch_norm: bool = True,
) -> Tensor:
    """GDPO advantage: ``S_i = Σ_k w_k (r_ik − mean_g r_k)/(std_g r_k + eps)``, then
    ``A = (S − mean_batch S)/(std_batch S + eps)``.

    Normalizing each component first keeps distinct reward profiles apart (GRPO's summed total
    can map different profiles to the same advantage: "advantage collapse").

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN entries contribute 0 to ``S``.
        groups, weights: as for every estimator (weights ``[K]``).
        eps: added to each std (group and batch). TRL 1.16 uses 1e-4.
        ddof: of both stds; 1 matches TRL's ``normalize_then_sum``.
        batch_norm: apply the final batch normalization over all scored rollouts (TRL does).

    Returns:
        ``[N]`` in the computing dtype. Matches TRL 1.16 ``multi_objective_aggregation="normalize_then_sum"``
        at the defaults. verl's GDPO whitens per token over the response mask instead of per
        rollout; the two differ when responses differ in length.
    """
    eps = check_eps(eps, "gdpo")
    ddof = check_ddof(ddof, "gdpo")
    check_bool(batch_norm, "batch_norm", "gdpo")
    return summed_zscores(rewards, groups, weights, eps, ddof, batch_norm)
