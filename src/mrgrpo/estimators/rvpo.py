"""RVPO: GDPO's per-component z-scores folded by a soft-min instead of a sum (arXiv 2605.05750)."""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError
from mrgrpo.estimators._checks import check_bool
from mrgrpo.estimators._multi import ddof_option, eps_option, given, number_option
from mrgrpo.estimators.gdpo import componentwise_advantages
from mrgrpo.estimators.groups import Groups, batch_standardize
from mrgrpo.estimators.registry import register_estimator

#: Below ``1 − LOG1P_LIMIT``, ``Σ p exp(...)`` is summed directly (see :func:`soft_min`).
LOG1P_LIMIT = 0.75
#: The unshifted path of :func:`soft_min` needs ``κ·max|z|`` at most this (``e^{±60}`` and
#: ``K`` times it are far inside float32's range).
DIRECT_EXPONENT = 60.0
#: ... and its rounding bound at most this many units of rounding times the spread of the result.
DIRECT_SHARE = 4.0


def simplex_weights(weights: Tensor, estimator: str) -> Tensor:
    """``p_k = w_k / Σ_l w_l`` ``[K]`` float64 (a :class:`ConfigError` for a negative weight or
    weights that are all 0: a soft-min averages over a probability vector)."""
    values = weights.tolist()
    if any(v < 0 for v in values) or not any(v > 0 for v in values):
        raise ConfigError(
            f"{estimator}: weights must be >= 0 with at least one > 0 (they are normalized to sum to 1), got {values}"
        )
    return weights / weights.sum()


def soft_min(z: Tensor, p: Tensor, kappa: float, dim: int) -> Tensor:
    """``−(1/κ) log Σ_k p_k exp(−κ z_k)`` along ``dim`` of the 2-D ``z`` (``[N]``).

    ``p`` is ``[K]`` (one probability vector for every row) or shaped as ``z`` (per row; its
    entries along ``dim`` sum to 1 or are all 0, and a row with all 0 gets 0). Entries with
    ``p = 0`` take no part. Computed shifted by the row's smallest active ``z``:
    ``z_min − (1/κ) log1p(Σ_k p_k expm1(−κ (z_k − z_min)))`` — every exponent is ``<= 0`` (no
    overflow for any finite κ), and ``log1p``/``expm1`` keep small κ exact (the limit κ → 0 is
    the weighted mean, with no cancellation). Where the sum inside is below 1/4 (κ large: most
    terms vanish) ``log Σ_k p_k exp(...)`` is taken instead, exact there.

    With one ``p`` for every row, :func:`direct_soft_min` is tried first (one ``exp`` pass, no
    per-row minimum; the shifted form above is several times slower on the CPU)."""
    per_row = p.dim() == 2
    if not per_row:
        direct = direct_soft_min(z, p, kappa, dim)
        if direct is not None:
            return direct
    if per_row:
        active = p > 0
        z_active = torch.where(active, z, torch.full_like(z, float("inf")))
    else:
        active = None
        keep = p > 0
        if not bool(keep.all()):  # (components of weight 0 take no part)
            z, p = (z[:, keep] if dim == 1 else z[keep]), p[keep]
        z_active = z
    lowest = z_active.amin(dim=dim, keepdim=True)
    if per_row:
        lowest = torch.where(torch.isfinite(lowest), lowest, torch.zeros_like(lowest))  # (rows without any)
    # −κ (z − z_min) <= 0 where active, exactly 0 at the minimum (a fused κ·z_min − κ·z is not)
    shifted = torch.sub(z, lowest).mul_(-kappa)
    if active is not None:
        shifted = torch.where(active, shifted, torch.zeros_like(shifted))
    weights = p if per_row else (p if dim == 1 else p.unsqueeze(1))
    inside = _weighted_sum(torch.expm1(shifted), weights, dim, per_row)  # Σ p (e − 1) ∈ [−1, 0]
    result = torch.log1p(inside)
    # log1p(x) near x = −1 magnifies the rounding of x; there Σ p e itself is summed instead
    small = inside < -LOG1P_LIMIT
    if bool(small.any()):
        rows = small.nonzero().flatten()
        part = shifted.index_select(1 - dim, rows)
        part_weights = weights.index_select(1 - dim, rows) if per_row else weights
        result[rows] = torch.log(_weighted_sum(part.exp_(), part_weights, dim, per_row))
    return lowest.squeeze(dim) - result / kappa


def direct_soft_min(z: Tensor, p: Tensor, kappa: float, dim: int) -> Tensor | None:
    """``−(1/κ) log Σ_k p_k exp(−κ z_k)`` unshifted, for one ``p`` ``[K]`` (``κ > 0``), or
    ``None`` where this is not exact enough (the caller then takes the shifted form).

    Taken only where (a) ``κ·max|z| <= DIRECT_EXPONENT`` (no term overflows, and the sum, at
    least ``exp(−κ·max|z|)``, does not underflow) and (b) its rounding is small against the
    result's spread. With ``u`` the dtype's unit roundoff: each ``p_k e^{−κ z_k}`` is within
    about ``2u`` relative (``exp`` is within one ulp; the rounding of ``κ z`` itself moves the
    result by about ``u·|z|``, the z-scores' own rounding), their sum within ``(K + 2)u``, its
    logarithm within ``(K + 3)u`` absolute: the result within ``bound = (K + 4)·u/κ``
    absolute. The path is kept when ``bound <= DIRECT_SHARE·u·(max − min of the result)``:
    after the batch whitening that is at most ``2·DIRECT_SHARE·u`` (8u, 4.8e-7 in float32)
    relative to the largest advantage (the shifted form: a few u). It is checked on the range
    of ``z`` first (the result lies within it) and on the result after."""
    if kappa <= 0 or z.numel() == 0:
        return None
    low, high = (float(v) for v in torch.aminmax(z))
    if kappa * max(abs(low), abs(high)) > DIRECT_EXPONENT:
        return None
    unit = torch.finfo(z.dtype).eps / 2
    bound = (p.numel() + 4) * unit / kappa
    if bound > DIRECT_SHARE * unit * (high - low):
        return None
    terms = torch.mul(z, -kappa).exp_()
    result = (terms @ p if dim == 1 else p @ terms).log_().div_(-kappa)
    low, high = (float(v) for v in torch.aminmax(result))
    if bound > DIRECT_SHARE * unit * (high - low):
        return None
    return result


def _weighted_sum(values: Tensor, weights: Tensor, dim: int, per_row: bool) -> Tensor:
    """``Σ_k p_k v_k`` along ``dim`` (a matrix-vector product when ``p`` is shared)."""
    if per_row:
        return (values * weights).sum(dim=dim)
    return values @ weights if dim == 1 else (values * weights).sum(dim=0)


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {
        "kappa": lambda v: number_option(v, "kappa", "rvpo"),
        "eps": lambda v: eps_option(v, "rvpo"),
        "ddof": lambda v: ddof_option(v, "rvpo"),
        "batch_norm": lambda v: check_bool(v, "batch_norm", "rvpo"),
    })


@register_estimator("rvpo", combine="normalize_then_sum", batch_norm=True, validate=_validate)
def rvpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    kappa: float = 1.0,
    eps: float = 1e-6,
    ddof: int = 1,
    batch_norm: bool = True,
) -> Tensor:
    """RVPO advantage: a soft-min over GDPO's per-component z-scores, then batch whitening.

    RVPO (arXiv 2605.05750, risk-sensitive alignment via variance regularization):
    ``z_ik = (r_ik − mean_g r_k)/(std_g r_k + eps)``, then
    ``A_i = −(1/κ) log Σ_k p_ik exp(−κ z_ik)`` with ``p_ik = w_k / Σ_l w_l`` over the
    components scored for rollout i, then ``(A − mean_batch A)/(std_batch A + eps)`` over the
    scored rollouts. The soft-min lies between the worst component, ``min_k z_ik`` (κ → ∞),
    and the weighted mean ``Σ_k p_ik z_ik`` (κ → 0; ``κ <= 0`` gives it exactly), so a rollout
    is rewarded for lifting its weakest objective rather than for trading one objective off
    against another.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored: left out of that component's
            group statistics and out of the rollout's soft-min (``p`` renormalized over its
            scored components).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]`` ``w_k >= 0``, at least one ``> 0``, normalized to ``p_k`` (the source
            has none: uniform ``p``); a component of weight 0 takes no part.
        kappa: the risk aversion κ (1.0 as the source); ``<= 0`` means the weighted mean.
        eps: added to the group stds and to the batch std; 1e-6 as the source's z-scores.
        ddof: of both stds; 1 (unbiased, as the source) by default.
        batch_norm: end with the batch whitening (the source does).

    Returns:
        ``[N]`` in the computing dtype. A component constant in its group (a group of one
        included) has ``z = 0``; a rollout with no component scored gets 0 and is left out of
        the whitening. With one component this is ``grpo``'s z-score (whitened); for ``κ <= 0``
        and weights summing to 1 (or ``eps = 0``) it equals ``gdpo`` with the same ``eps``.
        The source whitens per token (``rsqrt(var + 1e-8)``) and gives a group of one its raw
        score; this whitens per rollout and gives it 0.
    """
    kappa = number_option(kappa, "kappa", "rvpo")
    eps = eps_option(eps, "rvpo")
    ddof = ddof_option(ddof, "rvpo")
    check_bool(batch_norm, "batch_norm", "rvpo")
    p = simplex_weights(weights, "rvpo")
    zl, has_nan = componentwise_advantages(rewards, groups, eps, ddof)
    dim = 1 if groups.block_size is not None else 0
    z = zl.reshape(groups.num_rollouts, -1) if dim == 1 else zl  # [N, K] or [K, N]
    p = p.to(z.dtype)
    scored = None
    if has_nan:
        present = ~torch.isnan(rewards if dim == 1 else rewards.T)
        mass = present * (p if dim == 1 else p.unsqueeze(1))  # p_k on the scored entries
        total = mass.sum(dim=dim, keepdim=True)
        p_rows = mass / torch.where(total > 0, total, torch.ones_like(total))
        scored = ~torch.isnan(rewards).all(dim=1)
        if kappa <= 0:
            advantages = (z * p_rows).sum(dim=dim)
        else:
            advantages = soft_min(z, p_rows, kappa, dim)
    elif kappa <= 0:
        advantages = groups.combine(zl, p)
    else:
        advantages = soft_min(z, p, kappa, dim)
    if not batch_norm:
        return advantages if scored is None else torch.where(scored, advantages, torch.zeros_like(advantages))
    return batch_standardize(advantages, scored, ddof, eps)
