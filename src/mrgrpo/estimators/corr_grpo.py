"""CorrGRPO: GRPO's centered total, normalized by the sum of the in-group correlation matrix.

Plus the robust options this library adds (each off by default, so the plain estimator is
exactly the paper's): correlation ``shrinkage``, batch ``pooling``, a floor ``min_corr_sum``,
a ``"standardized"`` numerator, a fixed ``correlation``, and ``correlation_ema``: the
batch-pooled correlation smoothed across training steps, carried as the estimator's state
(see :func:`ema_correlation_step` and :mod:`.corr_ema`).

Notation for one group g of n rollouts: ``c_il = r_il − mean_g r_l`` (NaN entries
mean-imputed: ``c = 0``), ``z_il = c_il / sqrt(Σ_{i∈g} c_il²)`` (0 for a component constant in
the group), so the in-group Pearson correlation is ``ρ_lm = Σ_i z_il z_im`` and the quadratic
form ``uᵀρu = Σ_i (Σ_l u_l z_il)²`` is a sum of squares (never negative, even in floating
point). ``a_l ∈ {0, 1}`` marks the components that vary in the group (the paper zeroes the row
and column of the others, diagonal included).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError
from mrgrpo.estimators._checks import check_choice, check_decay, check_eps
from mrgrpo.estimators.groups import GroupMoments, Groups, group_moments
from mrgrpo.estimators.registry import register_estimator

NUMERATORS = ("raw", "standardized")
POOLINGS = ("group", "batch")


def correlation_sum(weighted_centered: Tensor, groups: Groups) -> Tensor:
    """``Σ_{l,m} ρ_lm`` per group ``[num_groups]``, ρ the Pearson correlation of the weighted
    components ``c_il = w_l (r_il − mean_g r_l)`` ``[N, K]`` within the group (a negative weight
    flips the sign of that component's correlations, a zero weight removes it): ``Σ_i (Σ_l z_il)²``."""
    norm = groups.sum(weighted_centered * weighted_centered).sqrt()
    z = weighted_centered / groups.gather(torch.where(norm > 0, norm, torch.ones_like(norm)))
    row = z.sum(dim=1, keepdim=True)
    return groups.sum(row * row).squeeze(1)


def pooled_correlation(centered: Tensor) -> Tensor:
    """``[K, K]`` Pearson correlation of group-centered rows ``[N, K]`` pooled over the whole
    batch (``Σ_i c_il c_im / sqrt(Σ_i c_il² Σ_i c_im²)``; 0 rows/columns for constant components)."""
    norm = (centered * centered).sum(dim=0).sqrt()
    z = centered / torch.where(norm > 0, norm, torch.ones_like(norm))
    return z.T @ z


def pair_sums(z: Tensor, groups: Groups | None) -> Tensor:
    """``Σ_i z_il z_im`` per group (``groups`` given; ``z`` in its layout) or over the batch
    (``z`` flat ``[N, K]``): ``[..., K·K]`` with the pair on the last axis."""
    if groups is None:
        return (z.T @ z).reshape(-1)
    if groups.block_size is not None:  # [ng, G, K] -> [ng, K*K]
        return torch.einsum("bgl,bgm->blm", z, z).reshape(z.shape[0], -1)
    k = z.shape[0]  # [K, N] -> [ng, K*K]
    products = (z.unsqueeze(1) * z.unsqueeze(0)).reshape(k * k, -1)
    return groups.total(products).T


def shrinkage_intensity(z: Tensor, active: Tensor, dof: Tensor, groups: Groups | None) -> Tensor:
    """Shrinkage intensity toward the identity, from the sample size and K:

    ``λ = min(1, P / (dof · Σ_{l≠m} ρ_lm²))`` over the ``P = k(k − 1)`` ordered pairs of the
    ``k`` varying components, ``dof = G − 1``.

    This is Schäfer & Strimmer's (2005, "A shrinkage approach to large-scale covariance matrix
    estimation", target "D": correlations shrunk to the identity) optimal intensity
    ``λ* = Σ_{l≠m} Var(ρ_lm) / Σ_{l≠m} ρ_lm²`` with the sampling variance of each correlation
    taken at its exact value under independence, ``E[ρ²] = 1/(G − 1)`` (normal data), instead
    of the plug-in estimate, which degenerates for tiny groups (at G = 2 every sample
    correlation is ±1 and the plug-in variance is 0, so it would never shrink). So λ = 1 at
    G = 2 (a 2-sample correlation carries no information), and λ falls as G grows and as the
    observed correlations stand out from the noise floor ``1/(G − 1)``. With pooling, ``dof``
    is the batch's ``Σ_g (G_g − 1)``.

    Args:
        z: unit-norm centered columns: per group in the layout of ``groups``, or flat
            ``[N, K]`` over the batch (``groups=None``).
        active: ``[num_groups, K]`` (or ``[K]``) varying components.
        dof: ``[num_groups]`` (or scalar) degrees of freedom.
        groups: per-group sums when given, else sums over the batch.
    """
    rho = pair_sums(z, groups)
    k_active = active.to(z.dtype).sum(dim=-1)
    off_diagonal_sq = ((rho * rho).sum(dim=-1) - k_active).clamp(min=0.0)  # diagonal ρ_ll = 1
    pairs = k_active * (k_active - 1)
    dof = dof.to(z.dtype)
    informative = (off_diagonal_sq > 0) & (dof > 0)
    ratio = pairs / torch.where(informative, dof * off_diagonal_sq, torch.ones_like(off_diagonal_sq))
    return torch.where(informative, ratio, torch.ones_like(ratio)).clamp(0.0, 1.0)


def check_corr_options(
    shrinkage: Any, pooling: Any, min_corr_sum: Any, numerator: Any, correlation: Any, k: int, name: str
) -> Tensor | None:
    check_choice(pooling, "pooling", POOLINGS, name)
    check_choice(numerator, "numerator", NUMERATORS, name)
    if shrinkage != "auto" and (
        isinstance(shrinkage, bool) or not isinstance(shrinkage, (int, float)) or not 0 <= shrinkage <= 1
    ):
        raise ConfigError(f"{name}: shrinkage must be a number in [0, 1] or 'auto', got {shrinkage!r}")
    if min_corr_sum is not None and (
        isinstance(min_corr_sum, bool) or not isinstance(min_corr_sum, (int, float)) or not 0 <= min_corr_sum < float("inf")
    ):
        raise ConfigError(f"{name}: min_corr_sum must be None or a finite number >= 0, got {min_corr_sum!r}")
    if correlation is None:
        return None
    matrix = torch.as_tensor(correlation, dtype=torch.float64)
    if matrix.shape != (k, k) or not bool(torch.isfinite(matrix).all()):
        raise ConfigError(f"{name}: correlation must be a finite [K, K] = [{k}, {k}] matrix, got shape {tuple(matrix.shape)}")
    if pooling != "batch":
        raise ConfigError(f"{name}: a given correlation matrix replaces the batch estimate: set pooling='batch'")
    return matrix


def robust_corr_advantages(
    rewards: Tensor,
    groups: Groups,
    coefficients: Tensor,
    *,
    eps: float,
    shrinkage: float | str,
    pooling: str,
    min_corr_sum: float | None,
    numerator: str,
    correlation: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Shared math of ``corr_grpo`` and ``sa_corr_grpo``: advantages ``[N]`` and the per-group
    denominator ``sqrt(D + eps)`` ``[num_groups]`` (for diagnostics).

    Computed in the dtype of the group moments (the input's, or float64 where values needed
    rescaling), in the layout of ``groups``; correlations are scale-free, so per-group scaled
    moments enter them directly.
    """
    moments = group_moments(rewards, groups)
    dtype = moments.centered.dtype
    w = coefficients.to(dtype)
    norm = moments.sum_sq.sqrt()
    active_l = norm > 0  # per-group layout
    # (1/0 = inf where a column is constant, never selected: one op fewer than a safe divisor)
    inverse_norm = torch.where(active_l, 1.0 / norm, 0.0)
    active = groups.flat_groups(active_l)  # [ng, K]
    # z (unit-norm centered columns) is only materialized where an option needs it
    needs_z = numerator == "standardized" or (shrinkage == "auto" and pooling == "group")
    z = moments.centered * groups.spread(inverse_norm) if needs_z else None
    if numerator == "raw":
        top = groups.combine(moments.unscaled(), w)
        # ρ of the weighted components: sign(w_l) sign(w_m) ρ_lm
        u = torch.sign(w) * active
    else:
        # Σ_l w_l x_il with x the in-group z-score (ddof=1): Var_g(Σ w x) = Σ_lm w_l w_m ρ_lm
        dof = (groups.layout_sizes(dtype) - 1).clamp(min=0).sqrt()
        top = groups.combine(z * groups.spread(dof), w)
        u = w * active
    if pooling == "group":
        # uᵀρu = Σ_i (Σ_l u_l z_il)², with u_l z_il = (u_l / norm_l) c_il
        coefficient = groups.spread(groups.layout_groups(u) * inverse_norm)
        row = groups.reduce_cols(moments.centered * coefficient)
        quadratic = groups.flat_groups(groups.total(row * row)).squeeze(1)
    else:
        if correlation is None:
            rho = pooled_correlation(groups.unrows(batch_units(moments)))
        else:
            rho = correlation.to(device=rewards.device, dtype=dtype)
        quadratic = ((u @ rho) * u).sum(dim=1).clamp(min=0.0)  # PSD: only rounding could go below 0
    if shrinkage == "auto":
        if pooling == "group":
            lam = shrinkage_intensity(z, active, groups.sizes - 1, groups)
        else:
            scored = ~torch.isnan(rewards).all(dim=1) if moments.present is not None else None
            n_scored = int(scored.sum()) if scored is not None else groups.num_rollouts
            scored_groups = (groups.sum(scored.to(dtype).unsqueeze(1)) > 0).sum() if scored is not None else groups.num_groups
            dof = torch.as_tensor(n_scored - scored_groups, device=rewards.device)
            pooled = groups.unrows(batch_units(moments))
            pooled_norm = (pooled * pooled).sum(dim=0).sqrt()
            pooled_z = pooled / torch.where(pooled_norm > 0, pooled_norm, torch.ones_like(pooled_norm))
            lam = shrinkage_intensity(pooled_z, pooled_norm > 0, dof, None).expand(groups.num_groups)
    elif not (pooling == "group" and shrinkage == 0):  # (unused there)
        lam = torch.full((groups.num_groups,), float(shrinkage), dtype=dtype, device=rewards.device)
    if pooling == "group" and shrinkage == 0:
        denominator_sq = quadratic  # exactly the paper's sum, no extra rounding
    else:
        # (1 − λ) uᵀρu + λ uᵀIu, the identity restricted to the varying components
        denominator_sq = (1 - lam) * quadratic + lam * (u * u).sum(dim=1)
    if min_corr_sum is not None:
        denominator_sq = denominator_sq.clamp(min=float(min_corr_sum))
    denominator = (denominator_sq + eps).sqrt()
    safe = torch.where(denominator > 0, denominator, 1.0)
    if groups.block_size is not None:
        advantages = (top.view(groups.num_groups, -1) / safe.unsqueeze(1)).reshape(-1)
    else:
        advantages = top / safe.index_select(0, groups.index)
    # top is exactly 0 where every component is constant in the group (also for size-1 groups)
    return torch.where(top != 0, advantages, 0.0), denominator


def batch_units(moments: GroupMoments) -> Tensor:
    """Layout rows of centered values in one unit per column across all groups (the scaled
    moments' per-group factors undone relative to the smallest, so nothing overflows)."""
    if moments.scale is None:
        return moments.centered
    groups = moments.groups
    smallest = groups.flat_groups(moments.scale).amin(dim=0)  # [K]: the largest magnitudes
    return moments.centered * (groups.col(smallest) / groups.spread(moments.scale))


def ema_correlation_step(
    state: dict[str, Any] | None, rewards: Tensor, groups: Groups, weights: Tensor, decay: float
) -> dict[str, Any]:
    """The smoothed correlation's state after one batch (pure: ``state`` is not modified).

    ``M_t = decay·M_{t−1} + (1 − decay)·ρ_batch``, ρ the ``[K, K]`` correlation of the
    group-centered components pooled over the batch with the signs of the weights folded in,
    returned bias-corrected as ``correlation = M_t / (1 − decay^t)`` so early steps are not
    shrunk toward 0 (as in Adam). State: ``{"raw": M_t, "correlation": [[...]], "steps": t,
    "decay": d}`` (plain lists and numbers). A state built with another decay, or for another
    number of components, raises.
    """
    decay = check_decay(decay, "correlation_ema", "corr_grpo")
    if decay is None:
        raise ConfigError("corr_grpo: correlation_ema needs a decay in [0, 1)")
    units = groups.unrows(batch_units(group_moments(rewards, groups)))
    rho = pooled_correlation(units * torch.sign(weights).to(units.dtype)).double().cpu()
    k = rewards.shape[1]
    if state is None:
        steps, raw = 0, torch.zeros(k, k, dtype=torch.float64)
    else:
        if state.get("decay", decay) != decay:
            raise ConfigError(f"state was built with decay={state['decay']}, not {decay}: keep decay fixed over a run")
        try:
            steps, raw = int(state["steps"]), torch.tensor(state["raw"], dtype=torch.float64)
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"corr_grpo: not a correlation_ema state (keys raw, correlation, steps, decay): {sorted(state)}") from None
        if raw.shape != (k, k):
            raise ConfigError(f"state is for {raw.shape[0] if raw.dim() else 0} components, the rewards have {k}")
    raw = decay * raw + (1 - decay) * rho
    steps += 1
    corrected = raw / (1 - decay**steps)
    return {"raw": raw.tolist(), "correlation": corrected.tolist(), "steps": steps, "decay": decay}


def check_given_corr_options(options: dict[str, Any], num_components: int | None, name: str, defaults: dict[str, Any]) -> None:
    """The ``validate`` trait of ``corr_grpo`` and ``sa_corr_grpo`` (no data needed)."""
    merged = {**defaults, **options}
    if "eps" in options:
        check_eps(options["eps"], name)
    correlation = merged["correlation"]
    k = num_components
    if k is None and correlation is not None:
        try:
            k = len(correlation)
        except TypeError:
            k = 0
    check_corr_options(
        merged["shrinkage"], merged["pooling"], merged["min_corr_sum"], merged["numerator"], correlation, k or 0, name
    )
    if check_decay(options.get("correlation_ema"), "correlation_ema", name) is not None:
        clash = sorted({"pooling", "correlation"} & set(options))
        if clash:
            raise ConfigError(
                f"correlation_ema sets {clash} itself (pooling='batch' with the smoothed matrix): remove them"
            )


def _check_corr_grpo_options(options: dict[str, Any], num_components: int | None) -> None:
    check_given_corr_options(options, num_components, "corr_grpo", corr_grpo.__kwdefaults__)


def _group_scale(weighted_centered: Tensor, groups: Groups) -> Tensor:
    """CorrGRPO's scale of each group's centered total at its defaults: ``1/sqrt(Σρ + 1e-6)``
    ``[num_groups]`` (the ``group_scale`` trait)."""
    return 1.0 / (correlation_sum(weighted_centered, groups) + corr_grpo.__kwdefaults__["eps"]).sqrt()


def _scale_diagnostics(scales: Tensor) -> dict[str, float | None]:
    """Of the varying groups: the fraction whose centered total CorrGRPO amplifies
    (``sqrt(Σρ + eps) < 1``: anti-correlated rewards push Σρ toward 0) and the largest factor."""
    if not scales.numel():
        return {"denominator_below_one": None, "max_amplification": None}
    return {
        "denominator_below_one": float((scales > 1).to(torch.float64).mean()),
        "max_amplification": float(scales.max()),
    }


@register_estimator(
    "corr_grpo", combine="sum_then_normalize", validate=_check_corr_grpo_options,
    group_scale=_group_scale,
    scale_diagnostics=_scale_diagnostics,
)
def corr_grpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    eps: float = 1e-6,
    shrinkage: float | str = 0.0,
    pooling: str = "group",
    min_corr_sum: float | None = None,
    numerator: str = "raw",
    correlation: Any = None,
    correlation_ema: float | None = None,
    state: dict[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Any] | None]:
    """CorrGRPO advantage ``A_i = Σ_l w_l (r_il − mean_g r_l) / sqrt(Σ_{l,m} ρ_lm + eps)``.

    GRPO divides the centered total by ``sqrt(Var T) = sqrt(Σ_{l,m} Cov_lm)``, in which a
    high-variance component dominates; CorrGRPO replaces covariances with correlations (of the
    weighted components: ``sign(w_l w_m) ρ_lm``) so every varying component counts 1 on the
    diagonal whatever its scale. The numerator keeps the weighted raw total (the rewards'
    units); there is no batch renormalization.

    Args:
        rewards: ``[N, K]`` float32 or float64. NaN entries are mean-imputed (centered value 0) in the
            numerator and in the correlations.
        groups, weights: as for every estimator (weights ``[K]``).
        eps: added inside the square root (paper: 1e-6).
        shrinkage: λ in [0, 1] shrinking ρ toward the identity (on the varying components):
            ``ρ' = (1 − λ) ρ + λ I``, so ``Σρ' ≥ λ·(number of varying components)``. ``"auto"``:
            the Schäfer–Strimmer (2005) optimal intensity estimated per group from its G
            rollouts (see :func:`shrinkage_intensity`): 1 at G = 2, falling as G grows.
        pooling: ``"group"`` (paper): ρ estimated in each group from its G rollouts;
            ``"batch"``: one ρ from all group-centered rollouts of the batch, applied to every
            group (restricted to the components that vary in that group).
        min_corr_sum: floor ``f`` on the denominator's sum. Then
            ``|A_i| ≤ |Σ_l w_l c_il| / sqrt(f + eps)``; with the standardized numerator
            ``|x_il| ≤ (G − 1)/sqrt(G)`` so ``|A_i| ≤ Σ_l |w_l| (G − 1)/sqrt(G) / sqrt(f + eps)``.
        numerator: ``"raw"`` (paper) or ``"standardized"``: ``Σ_l w_l x_il`` with ``x`` the
            in-group z-score (ddof=1), over the matching ``sqrt(Σ_lm w_l w_m ρ_lm + eps)`` —
            the in-group std of that sum — so the advantages have in-group std 1 (up to eps)
            and are invariant to a positive affine change of any component. It is GDPO's
            summed z-scores renormalized per group instead of over the batch.
        correlation: a fixed ``[K, K]`` correlation matrix to use instead of estimating one
            (with ``pooling="batch"``).
        correlation_ema: an EMA decay in ``[0, 1)``: the batch-pooled correlation smoothed
            across training steps (:func:`ema_correlation_step`) replaces the batch's own
            (implies ``pooling="batch"``; do not set ``pooling`` or ``correlation``). ``None``
            (default): no smoothing, no state.
        state: the smoothed correlation's state from the previous training batch (``None``:
            the first); carried by the caller (:func:`mrgrpo.compute_advantages_with_state`).

    Returns:
        ``(advantages, new_state)``: ``[N]`` in the computing dtype, summing to 0 within every
        group (a group of one rollout, or with every component constant, gives exact zeros),
        and the new state (``None`` without ``correlation_ema``).

    Known failure modes of the plain estimator (which the options address): anti-correlated
    rewards drive Σρ to 0 and the advantages to ``num/sqrt(eps)``; ρ from small G is noisy;
    the raw numerator carries the rewards' units.

    Example (paper Figure 2): ρ12 = 0.9756, ρ13 = ρ23 = 0.1098, scale 1/sqrt(5.3904) = 0.4307.
    """
    eps = check_eps(eps, "corr_grpo")
    new_state, pooling, correlation = smoothed(state, rewards, groups, weights, correlation_ema, pooling, correlation, "corr_grpo")
    matrix = check_corr_options(shrinkage, pooling, min_corr_sum, numerator, correlation, rewards.shape[1], "corr_grpo")
    advantages, _ = robust_corr_advantages(
        rewards, groups, weights, eps=eps, shrinkage=shrinkage, pooling=pooling,
        min_corr_sum=min_corr_sum, numerator=numerator, correlation=matrix,
    )
    return advantages, new_state


def smoothed(
    state: dict[str, Any] | None, rewards: Tensor, groups: Groups, weights: Tensor, decay: float | None,
    pooling: str, correlation: Any, name: str,
) -> tuple[dict[str, Any] | None, str, Any]:
    """``(new_state, pooling, correlation)`` for one call: with ``decay`` the EMA step and its
    smoothed matrix under batch pooling; without, the options as given (and no state)."""
    if decay is None:
        if state is not None:
            raise ConfigError(f"{name}: a correlation state was given but correlation_ema is not set: set it, or drop the state")
        return None, pooling, correlation
    new_state = ema_correlation_step(state, rewards, groups, weights, decay)
    return new_state, "batch", new_state["correlation"]
