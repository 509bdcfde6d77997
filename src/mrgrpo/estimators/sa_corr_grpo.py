"""SA-CorrGRPO: SA-MRPO's saturation weights in CorrGRPO's numerator and denominator."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from mrgrpo.estimators._checks import check_eps, check_gamma, check_reward_ranges
from mrgrpo.estimators.corr_grpo import check_corr_options, check_given_corr_options, robust_corr_advantages, smoothed
from mrgrpo.estimators.groups import Groups
from mrgrpo.estimators.registry import register_estimator
from mrgrpo.estimators.sa_mrpo import saturation_coefficients


def _check_sa_corr_grpo_options(options: dict[str, Any], num_components: int | None) -> None:
    if "gamma" in options:
        check_gamma(options["gamma"], "sa_corr_grpo")
    check_given_corr_options(
        {k: v for k, v in options.items() if k not in ("gamma", "reward_ranges")}, num_components, "sa_corr_grpo",
        {k: v for k, v in sa_corr_grpo.__kwdefaults__.items() if k not in ("gamma", "reward_ranges")},
    )


@register_estimator(
    "sa_corr_grpo", combine="sum_then_normalize", needs_ranges=True, validate=_check_sa_corr_grpo_options
)
def sa_corr_grpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    reward_ranges: Any = None,
    gamma: float = 0.5,
    eps: float = 1e-6,
    shrinkage: float | str = 0.0,
    pooling: str = "group",
    min_corr_sum: float | None = None,
    numerator: str = "raw",
    correlation: Any = None,
    correlation_ema: float | None = None,
    state: dict[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Any] | None]:
    """CorrGRPO with SA-MRPO's saturation-aware coefficients ``coef_k = w_k (1 − s_k)^γ``.

    ``s_k = clip((mean_batch r_k − lo_k)/(hi_k − lo_k), 0, 1)``; the coefficients replace the
    weights in the numerator ``Σ_k coef_k c_ik`` and define the re-weighted components whose
    correlations form the denominator (a fully saturated component, ``coef = 0``, leaves both).
    SA-MRPO changes *which objectives* get the gradient budget, CorrGRPO *how the group's
    spread is measured*; the two act on different parts of the advantage and compose.
    ``γ = 0`` is exactly ``corr_grpo``.

    Args:
        reward_ranges: required, ``K`` pairs ``(lo, hi)``.
        gamma: ``γ ≥ 0`` (SA-MRPO's default 0.5).
        eps, shrinkage, pooling, min_corr_sum, numerator, correlation, correlation_ema, state:
            as in ``corr_grpo`` (the smoothed correlation is that of the weighted components,
            with the weights' signs, not the saturation coefficients).

    Returns:
        ``(advantages, new_state)``: ``[N]`` in the computing dtype, summing to 0 within every
        group, and the new state (``None`` without ``correlation_ema``).
    """
    ranges = check_reward_ranges(reward_ranges, rewards.shape[1], "sa_corr_grpo").to(rewards.device)
    gamma = check_gamma(gamma, "sa_corr_grpo")
    eps = check_eps(eps, "sa_corr_grpo")
    new_state, pooling, correlation = smoothed(
        state, rewards, groups, weights, correlation_ema, pooling, correlation, "sa_corr_grpo"
    )
    matrix = check_corr_options(shrinkage, pooling, min_corr_sum, numerator, correlation, rewards.shape[1], "sa_corr_grpo")
    coefficients = saturation_coefficients(rewards, weights, ranges, gamma)
    advantages, _ = robust_corr_advantages(
        rewards, groups, coefficients, eps=eps, shrinkage=shrinkage, pooling=pooling,
        min_corr_sum=min_corr_sum, numerator=numerator, correlation=matrix,
    )
    return advantages, new_state
