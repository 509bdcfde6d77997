"""GD²PO: GDPO with rollouts whose components pull in opposite directions filtered out (arXiv 2606.16771)."""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.estimators._multi import choice_option, ddof_option, eps_option, given, number_option
from mrgrpo.estimators.groups import Groups, batch_standardize, group_moments, make_groups
from mrgrpo.estimators.registry import register_estimator

MODES = ("hard", "snr")
#: A contribution counts as positive above this, negative below its negative (official value).
SIGN_EPS = 1e-8
#: Added to ``Σ_k |u_ik|`` in the agreement ratio.
RATIO_EPS = 1e-8


def conflict_filter(contributions: Tensor, mode: str, tau: float, dim: int = 1) -> tuple[Tensor, Tensor]:
    """``(summed, dropped)`` from the weighted z-scores ``u_ik = w_k z_ik`` (components along
    ``dim``): ``S_i = Σ_k u_ik``, and whether rollout i is dropped (it conflicts, some
    ``u_ik > 1e-8`` and some ``< −1e-8``, and in ``snr`` mode also
    ``|S_i| / (Σ_k |u_ik| + 1e-8) < tau``)."""
    # (over the last axis of [N, K], a matrix-vector product is several times faster than sum)
    ones = contributions.new_ones(contributions.shape[dim])
    summed = contributions @ ones if dim == contributions.dim() - 1 else contributions.sum(dim=dim)
    # (amax and amin separately: several times faster than aminmax over this axis)
    conflict = (contributions.amax(dim=dim) > SIGN_EPS) & (contributions.amin(dim=dim) < -SIGN_EPS)
    if mode == "hard":
        return summed, conflict
    magnitude = contributions.abs()
    magnitude = magnitude @ ones if dim == contributions.dim() - 1 else magnitude.sum(dim=dim)
    agreement = summed.abs() / (magnitude + RATIO_EPS)
    return summed, conflict & (agreement < tau)


#: A float32 z-score of a varying component below this may hide the sign of a value at (or
#: within rounding of) its group's mean: such groups are recomputed in float64.
DOUBTFUL = 1e-4


def weighted_zscores(rewards: Tensor, groups: Groups, weights: Tensor, eps: float, ddof: int) -> tuple[Tensor, int]:
    """``u_ik = w_k z_ik`` as ``[N, K]`` (contiguous blocks) or ``[K, N]`` (index layout), and
    the component axis.

    float32 z-scores carry rounding of about 1e-7, above the 1e-8 sign test. A group where a
    varying component has some ``|z| < 1e-4`` (a value near its group mean, common with graded
    rewards) has its z-scores recomputed in float64 (and stored rounded to float32, which
    keeps their sign and size against 1e-8), so the conflict test decides as on exact values;
    everywhere else every nonzero ``|z|`` is far above the threshold and float32 decides the
    same. Such groups are few, so the recomputation costs little."""
    moments = group_moments(rewards, groups)
    z = moments.zscores(eps, ddof)
    if rewards.dtype == torch.float32:
        near = z.abs() < DOUBTFUL  # (also where missing: z is 0 there, but not varying)
        if groups.block_size is not None:
            near = near.any(dim=1, keepdim=True)
        else:
            near = groups.total(near.to(z.dtype)) > 0
        doubtful = near & (moments.sum_sq > 0)  # per group and component
        groups_doubtful = groups.flat_groups(doubtful).any(dim=1)
        if bool(groups_doubtful.any()):
            members = groups.gather(groups_doubtful).nonzero().flatten()
            subset = make_groups(groups.index[members], members.numel(), device=rewards.device)
            exact = group_moments(rewards[members].to(torch.float64), subset).zscores(eps, ddof)
            groups.unrows(z)[members] = subset.unrows(exact).to(z.dtype)
    w = weights.to(z.dtype)
    if groups.block_size is not None:  # [N, K] (a view): the components along axis 1
        return (z * w).view(groups.num_rollouts, -1), 1
    return z * w.unsqueeze(1), 0  # [K, N]


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
        test float32 cannot decide recomputed in float64, see :func:`weighted_zscores`).
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
    u, axis = weighted_zscores(rewards, groups, weights, eps, ddof)
    summed, dropped = conflict_filter(u, mode, tau, dim=axis)  # [N] each
    if bool(torch.isnan(rewards.sum())):
        scored = ~torch.isnan(rewards).all(dim=1)
        kept = scored & ~dropped
        counts = groups.sum(torch.stack([kept, scored], dim=1).to(summed.dtype))
        ratio = counts[:, 0] / counts[:, 1].clamp(min=1)
    else:  # every rollout scored
        kept = ~dropped
        ratio = groups.sum(kept.to(summed.dtype)) / groups.sizes.to(summed.dtype)
    values = torch.where(kept, summed * groups.gather(ratio), torch.zeros_like(summed))
    return batch_standardize(values, kept, ddof, eps)
