"""GD²PO: GDPO with rollouts whose components pull in opposite directions filtered out (arXiv 2606.16771)."""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.estimators._multi import choice_option, ddof_option, eps_option, given, number_option
from mrgrpo.estimators.groups import Groups, batch_standardize, group_moments, make_groups, standardize_kept
from mrgrpo.estimators.registry import register_estimator

MODES = ("hard", "snr")
#: A contribution counts as positive above this, negative below its negative (official value).
SIGN_EPS = 1e-8
#: Added to ``Σ_k |u_ik|`` in the agreement ratio.
RATIO_EPS = 1e-8


def conflict_filter(
    contributions: Tensor,
    mode: str,
    tau: float,
    dim: int = 1,
    *,
    factors: Tensor | None = None,
    magnitudes: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(summed, dropped)`` from the weighted z-scores ``u_ik = w_k z_ik`` (components along
    ``dim`` of a 2-D tensor): ``S_i = Σ_k u_ik``, and whether rollout i is dropped (it
    conflicts, some ``u_ik > 1e-8`` and some ``< −1e-8``, and in ``snr`` mode also
    ``|S_i| / (Σ_k |u_ik| + 1e-8) < tau``).

    ``contributions`` are the ``u_ik``; with ``factors`` ``[K]`` (the ``w_k``) they are the
    ``z_ik`` instead, and ``S = z·w``, ``Σ_k |u_ik| = |z|·|w|`` come from matrix-vector
    products without forming ``u`` (``magnitudes``: ``|z|`` if already at hand); ``u_ik`` is
    formed, rounded as ``w_k * z_ik``, only where the sign test runs. Over the last axis of
    ``[N, K]`` (small K), sums are matrix-vector products, several times faster than a
    reduction over that axis. In ``snr`` mode the sign test is only run where
    :func:`certain_conflict_magnitude` cannot settle it (see there: usually no rollout); in
    ``hard`` mode it is run as sums of nonnegative parts, ``Σ_k max(u_ik − 1e-8, 0) > 0``
    exactly when some ``u_ik > 1e-8`` (a difference of two floats is 0 only when they are
    equal, and a sum of nonnegative numbers is 0 only when each is), likewise for ``< −1e-8``."""
    last = dim == contributions.dim() - 1
    k = contributions.shape[dim]

    def weighted(values: Tensor) -> Tensor:  # u from rows of contributions
        if factors is None:
            return values
        return values * (factors if last else factors.unsqueeze(1))

    if mode == "hard":
        u = weighted(contributions)
        return (u @ u.new_ones(k) if last else u.sum(dim=0)), _conflicts(u, dim)
    if factors is None:
        ones = contributions.new_ones(k)
        summed = contributions @ ones if last else contributions.sum(dim=dim)
        magnitude = contributions.abs()
        magnitude = magnitude @ ones if last else magnitude.sum(dim=dim)
    else:
        magnitudes = contributions.abs() if magnitudes is None else magnitudes
        summed = contributions @ factors if last else factors @ contributions
        magnitude = magnitudes @ factors.abs() if last else factors.abs() @ magnitudes
    low = summed.abs() / (magnitude + RATIO_EPS) < tau
    margin = certain_conflict_magnitude(k, tau, contributions.dtype)
    # (the bound assumes sums that do not overflow: else, or with NaN, the sign test everywhere)
    if margin is None or not magnitude.numel() or not bool(magnitude.max() <= torch.finfo(magnitude.dtype).max / 4):
        return summed, _conflicts(weighted(contributions), dim) & low
    certain = magnitude > margin
    dropped = low & certain
    # The rest of the low-agreement rollouts: those with every u_ik = 0 (magnitude 0) do not
    # conflict; the others (Σ_k |u_ik| at most the bound, about 1e-6 at tau 0.8) are tested.
    unsure = (low & ~certain & (magnitude > 0)).nonzero().flatten()
    if unsure.numel():
        rows = weighted(contributions.index_select(1 - dim, unsure))
        dropped[unsure] = (rows.amax(dim=dim) > SIGN_EPS) & (rows.amin(dim=dim) < -SIGN_EPS)
    return summed, dropped


def _conflicts(contributions: Tensor, dim: int) -> Tensor:
    """Some ``u_ik > 1e-8`` and some ``u_ik < −1e-8``, per rollout (components along ``dim``)."""
    if dim != contributions.dim() - 1:
        return (contributions.amax(dim=dim) > SIGN_EPS) & (contributions.amin(dim=dim) < -SIGN_EPS)
    ones = contributions.new_ones(contributions.shape[dim])
    scratch = torch.sub(contributions, SIGN_EPS)
    conflict = scratch.clamp_(min=0.0) @ ones > 0
    torch.add(contributions, SIGN_EPS, out=scratch)
    return conflict & (scratch.clamp_(max=0.0) @ ones < 0)


def certain_conflict_magnitude(k: int, tau: float, dtype: torch.dtype) -> float | None:
    """A magnitude ``M`` above which a rollout whose computed agreement is below ``tau``
    conflicts for certain (``None`` when ``tau`` is too close to 1 for one to exist).

    A rollout without a conflict has all its significant ``u_ik`` (``|u_ik| > 1e-8``) of one
    sign, so ``|S| ≥ Σ|u| − 2·K·1e-8``. The computed sums of ``K`` terms are within
    ``γ = K·ε/(1 − K·ε)`` of the exact ones relative to ``Σ|u|`` (``ε`` the unit roundoff, any
    order of summation; formed as ``z·w``, the products' own rounding adds at most ``ε``, inside
    the slack below), and the sum ``+ 1e-8`` and the division round once each, so its
    computed agreement is at least
    ``(M(1 − γ) − 2K·1e-8)·ρ / (M(1 + γ) + 1e-8)`` with ``ρ = (1 − ε)/(1 + ε)²`` and ``M`` the
    exact ``Σ|u|``. With ``c = (1 − γ)ρ − tau(1 + γ) > 0`` that is at least ``tau`` once
    ``M ≥ (2K·1e-8 + 1e-8)/c``, i.e. once the computed ``Σ|u| ≥ (1 + γ)(2K + 1)·1e-8/c``. So
    a computed agreement below ``tau`` with a computed ``Σ|u|`` above twice that bound (the
    factor covers the bound's own rounding to ``dtype``) means a conflict; the rollout is
    dropped exactly as the sign test would drop it. Below the bound the sign test runs."""
    unit = torch.finfo(dtype).eps / 2
    if k * unit >= 0.5:
        return None
    gamma = 2 * k * unit / (1 - k * unit)  # (twice γ: slack)
    rho = (1 - unit) / (1 + unit) ** 2
    c = (1 - gamma) * rho - tau * (1 + gamma)
    if c <= 1e-3:
        return None
    return 2 * (1 + gamma) * (2 * k + 1) * max(SIGN_EPS, RATIO_EPS) * (1 + unit) / c


#: A float32 z-score of a varying component below this may hide the sign of a value at (or
#: within rounding of) its group's mean: such groups are recomputed in float64.
DOUBTFUL = 1e-4


def _smallest_in_block(xl: Tensor) -> Tensor:
    """Per-group minimum over the rows of blocks ``[num_groups, G, C]`` -> ``[num_groups, 1, C]``,
    as a tree of elementwise minima of halves (several times faster than ``amin(dim=1)``, a
    reduction over a short middle axis; the minimum is exact either way)."""
    while xl.shape[1] > 1:
        size, half = xl.shape[1], xl.shape[1] // 2
        smaller = torch.minimum(xl[:, :half], xl[:, half : 2 * half])
        if size % 2:
            smaller[:, :1] = torch.minimum(smaller[:, :1], xl[:, 2 * half :])
        xl = smaller
    return xl


def _doubtful_groups(magnitude: Tensor, sum_sq: Tensor, groups: Groups) -> Tensor:
    """``[num_groups]`` bool: some varying component (``sum_sq > 0``) of the group has a member
    with ``|z| < DOUBTFUL`` (``magnitude``: ``|z|`` in the layout, left unchanged)."""
    if groups.block_size is not None:
        near = _smallest_in_block(magnitude) < DOUBTFUL
        return groups.flat_groups(near & (sum_sq > 0)).any(dim=1)
    # [K, N]: only the rollouts with some |z| < DOUBTFUL (usually few) can make a group doubtful
    candidates = (magnitude.amin(dim=0) < DOUBTFUL).nonzero().flatten()
    if 4 * candidates.numel() > groups.num_rollouts:  # many (components constant in many groups)
        # Σ_g max(DOUBTFUL − |z|, 0) > 0 exactly when some member has |z| < DOUBTFUL (the
        # difference is positive exactly then; a sum of nonnegative numbers is 0 only when each is)
        near = groups.total(magnitude.neg().add_(DOUBTFUL).clamp_(min=0.0)) > 0
        return groups.flat_groups(near & (sum_sq > 0)).any(dim=1)
    codes = groups.index[candidates]
    hit = ((magnitude.index_select(1, candidates) < DOUBTFUL) & (sum_sq > 0).index_select(1, codes)).any(dim=0)
    doubtful = torch.zeros(groups.num_groups, dtype=torch.bool, device=magnitude.device)
    doubtful[codes[hit]] = True
    return doubtful


def checked_zscores(rewards: Tensor, groups: Groups, eps: float, ddof: int) -> tuple[Tensor, Tensor | None, int, bool]:
    """``z_ik`` as ``[N, K]`` (contiguous blocks) or ``[K, N]`` (index layout), ``|z_ik|`` in the
    same layout (float32 inputs; ``None`` for float64), the component axis, and whether the
    rewards may hold NaN (``False``: they hold none).

    float32 z-scores carry rounding of about 1e-7, above the 1e-8 sign test. A group where a
    varying component has some ``|z| < 1e-4`` (a value near its group mean, common with graded
    rewards) has its z-scores recomputed in float64 (and stored rounded to float32, which
    keeps their sign and size against 1e-8), so the conflict test decides as on exact values;
    everywhere else every nonzero ``|z|`` is far above the threshold and float32 decides the
    same. Such groups are few, so the recomputation costs little."""
    moments = group_moments(rewards, groups)
    # (in place: every [N, K] tensor fewer is a fresh allocation fewer, which costs as much as a pass)
    z = moments.zscores(eps, ddof, in_place=True)
    magnitudes = None
    if rewards.dtype == torch.float32:
        magnitudes = z.abs()
        groups_doubtful = _doubtful_groups(magnitudes, moments.sum_sq, groups)
        if bool(groups_doubtful.any()):
            _recompute64(z, rewards, groups, groups_doubtful, eps, ddof, magnitudes)
    has_nan = moments.present is not None
    if groups.block_size is not None:  # [N, K] (a view): the components along axis 1
        flat = None if magnitudes is None else magnitudes.view(groups.num_rollouts, -1)
        return z.view(groups.num_rollouts, -1), flat, 1, has_nan
    return z, magnitudes, 0, has_nan  # [K, N]


def _recompute64(
    z: Tensor, rewards: Tensor, groups: Groups, which: Tensor, eps: float, ddof: int, magnitudes: Tensor
) -> None:
    """Overwrite the z-scores (layout ``z``) of the groups ``which`` ``[num_groups]`` bool with
    their float64 values (rounded to ``z``'s dtype), and their ``magnitudes`` (``|z|``)."""
    if groups.block_size is not None:  # the groups' blocks, as blocks of their own
        chosen = which.nonzero().flatten()
        size = groups.block_size
        subset = Groups(chosen.numel() * size, chosen.numel(), size, None, rewards.device)
        blocks = groups.rows(rewards)[chosen].to(torch.float64)
        exact = group_moments(blocks.view(-1, blocks.shape[-1]), subset).zscores(eps, ddof).to(z.dtype)
        z[chosen] = exact
        magnitudes[chosen] = exact.abs()
        return
    members = groups.gather(which).nonzero().flatten()
    subset = make_groups(groups.index[members], members.numel(), device=rewards.device)
    exact = subset.unrows(group_moments(rewards[members].to(torch.float64), subset).zscores(eps, ddof)).to(z.dtype)
    groups.unrows(z)[members] = exact
    groups.unrows(magnitudes)[members] = exact.abs()


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {
        "mode": lambda v: choice_option(v, "mode", MODES, "gd2po"),
        "tau": lambda v: number_option(v, "tau", "gd2po"),
        "eps": lambda v: eps_option(v, "gd2po"),
        "ddof": lambda v: ddof_option(v, "gd2po"),
    })


@register_estimator("gd2po", combine="normalize_then_sum", batch_norm=True, validate=_validate)
def gd2po(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    mode: str = "snr",
    tau: float = 0.8,
    eps: float = 1e-6,
    ddof: int = 1,
) -> Tensor:
    """GD²PO advantage: GDPO's weighted z-scores with conflicting rollouts dropped, then whitened.

    The kept rollouts' sums are scaled by their group's keep ratio, then whitened over the
    kept rollouts.

    GD²PO (arXiv 2606.16771; code github Qwen-Applications/GD2PO): a rollout that one
    component rewards and another punishes sends contradictory gradient signal; dropping it
    (``hard``), or only when the components nearly cancel (``snr``), keeps the update on the
    rollouts whose objectives agree. Scaling by the keep ratio keeps a group with many dropped
    rollouts from being over-weighted by the whitening.

    With ``u_ik = w_k (r_ik − mean_g r_k)/(std_g r_k + eps)`` and ``S_i = Σ_k u_ik``: rollout i
    conflicts when some ``u_ik > 1e-8`` and some ``u_ik < −1e-8``; ``mode="hard"`` drops every
    conflicting rollout, ``mode="snr"`` only those with ``|S_i| / (Σ_k |u_ik| + 1e-8) < tau``.
    ``V_i = S_i · kept_g / n_g`` for kept rollouts (``n_g`` the group's scored rollouts), 0 for
    dropped ones; ``A = (V − mean_kept V)/(std_kept V + eps)`` on the kept rollouts, 0 elsewhere.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored (ignored per component, its
            ``u`` is 0).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]`` ``w_k`` (the official code sums unweighted: weights 1). The conflict
            test and the ratio use the weighted ``u_ik``, so a zero-weight component never
            causes a drop and a negative weight (a cost) flips its direction.
        mode: ``"snr"`` (default) or ``"hard"``.
        tau: the agreement threshold of ``snr``, clamped to [0, 1]; 0.8 as in every official
            training script (the code's own fallback is 0.2).
        eps: added to the group stds and to the final std; 1e-6 as the official group z-scores.
        ddof: of both stds; 1 (unbiased, as the official code) by default.

    Returns:
        ``[N]`` in the computing dtype (float32 inputs: float32, with the groups whose sign
        test float32 cannot decide recomputed in float64, see :func:`checked_zscores`).
        Fewer than two kept rollouts (or all kept values equal)
        give zeros. A group of one contributes 0 before the whitening (the official code gives
        it mean 0, std 1, i.e. its raw rewards), and the whitening is per rollout (the official
        code whitens per token, ``(x − mean)·rsqrt(var + 1e-8)``, which weights long responses
        more).
    """
    choice_option(mode, "mode", MODES, "gd2po")
    tau = min(max(number_option(tau, "tau", "gd2po"), 0.0), 1.0)
    eps = eps_option(eps, "gd2po")
    ddof = ddof_option(ddof, "gd2po")
    z, magnitudes, axis, has_nan = checked_zscores(rewards, groups, eps, ddof)
    w = weights.to(z.dtype)
    summed, dropped = conflict_filter(z, mode, tau, dim=axis, factors=w, magnitudes=magnitudes)  # [N] each
    if has_nan:
        scored = ~torch.isnan(rewards).all(dim=1)
        kept = scored & ~dropped
        counts = groups.sum(torch.stack([kept, scored], dim=1).to(summed.dtype))
        ratio = counts[:, 0] / counts[:, 1].clamp(min=1)
    else:  # every rollout scored
        kept = ~dropped
        ratio = groups.sum(kept.to(summed.dtype)) / groups.sizes.to(summed.dtype)
    values = summed * groups.gather(ratio)  # (the rows not kept get 0 from the whitening)
    if bool(torch.isfinite(values.sum())):  # (every value finite, the usual case)
        return standardize_kept(values, kept, ddof, eps)
    return batch_standardize(values, kept, ddof, eps)
