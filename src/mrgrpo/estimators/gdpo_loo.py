"""GDPO as NVIDIA NeMo-RL implements it: per-component leave-one-out baselines, summed, whitened."""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.errors import InputError
from mrgrpo.estimators._checks import check_bool
from mrgrpo.estimators._multi import eps_option, given
from mrgrpo.estimators.groups import Groups, batch_standardize, group_moments, make_groups
from mrgrpo.estimators.registry import register_estimator

#: A row whose downdated sum of squares (of the other rows) is below this share of its group's
#: is recomputed from the other rows themselves (see :func:`loo_scores`).
DOWNDATE_SHARE = 0.125


def loo_scores(rewards: Tensor, groups: Groups, leave_one_out: bool, eps: float) -> tuple[Tensor, bool]:
    """Per-component scores ``a_ik / (s_ik + eps)`` (``a_ik`` where ``s_ik = 0``) in the layout
    of ``groups`` (see :meth:`Groups.rows`), and whether any entry was NaN.

    ``a_ik = r_ik − b_ik`` with ``b_ik`` the mean of the other scored rows of the group
    (``leave_one_out``) or of all of them, and ``s_ik`` the unbiased std of those same rows
    (0 when they are fewer than two, or all equal). NaN entries, and a group with one scored
    row, give 0.

    With ``d_i = r_i − mean_g`` (two-pass, :func:`group_moments`) and ``n`` scored rows, the
    others' baseline gives ``a_i = d_i · n/(n − 1)`` and their sum of squared deviations is
    ``M2 − d_i² · n/(n − 1)`` (``M2`` the group's). That difference cancels only for a row
    that carries nearly all of the group's spread; with ``n >= 3`` at most one row per group
    and component can have its others' sum below 1/4 of ``M2`` (it is then the unique row
    farthest from the mean), and everywhere else the difference is exact to a few units of
    rounding. The rows below ``DOWNDATE_SHARE`` of ``M2`` have their others' std recomputed
    two-pass from the others (the row masked out): "the others are all equal" is then
    exactly ``s = 0``, as it is meant. (NeMo-RL's one-pass ``E[r²] − E[r]²`` leaves a rounding
    residue there and divides by about 1e-6: rewards ``[0.7, 0.7, 0.7, 1.3]`` give the last
    row 5.9e5 instead of 0.6 in float64.)
    """
    moments = group_moments(rewards, groups)
    has_nan = moments.present is not None
    d, count = moments.centered, _uniform(moments.count, has_nan)

    def rows(per_group: Tensor | float) -> Tensor | float:  # a per-group statistic against the layout
        return per_group if isinstance(per_group, float) else groups.spread(per_group)

    flagged = None
    if not leave_one_out:
        a, s = d, moments.std(1)  # (per group)
    elif isinstance(count, float) and count <= 2:  # every group of two: s = 0 (one other row)
        a, s = d.mul_(2.0 if count == 2 else 0.0), 0.0
    else:
        others = count - 1
        if isinstance(count, float):
            factor, spread_ratio = count / others, (count - 1) / (count * (count - 2))
            base = rows(moments.sum_sq / (count - 2))
        else:
            dof = count - 2
            factor = torch.where(others > 0, count / others.clamp(min=1), torch.zeros_like(count))
            # (n − 1)/(n(n − 2)), and M2/(n − 2), 0 where n <= 2
            spread_ratio = torch.where(dof > 0, others / (count * dof.clamp(min=1)), torch.zeros_like(count))
            base = rows(torch.where(dof > 0, moments.sum_sq / dof.clamp(min=1), torch.zeros_like(count)))
        a = d.mul_(rows(factor))  # (in place: the centered values are not needed again)
        # the others' variance (M2 − d·a)/(n − 2) = M2/(n − 2) − a²(n − 1)/(n(n − 2))
        if isinstance(spread_ratio, float):
            variance = torch.addcmul(base, a, a, value=-spread_ratio)
        else:
            variance = torch.addcmul(base, a * rows(spread_ratio), a, value=-1.0)
        flagged = variance < base * DOWNDATE_SHARE
        s = variance.sqrt_()  # (NaN where the downdate went below 0: only flagged rows, replaced below)
    if moments.scale is not None:  # (extreme magnitudes: back to the rewards' units, in float64)
        unit = groups.spread(moments.scale)
        a, s = a / unit, rows(s) / unit
    if flagged is not None and bool(flagged.any()):
        s = torch.where(flagged, _others_std(rewards, groups, flagged).to(a.dtype), s)
    if isinstance(s, float):
        return a, has_nan
    if s.shape != a.shape:  # a per-group std (no leave-one-out)
        return a / rows(torch.where(s > 0, s + eps, torch.ones_like(s))), has_nan
    zero = s == 0
    return a.div_(s.add_(eps).masked_fill_(zero, 1.0)), has_nan


def _uniform(count: Tensor, has_nan: bool) -> Tensor | float:
    """The groups' counts of scored entries as one number where they are all equal (no NaN,
    groups of one size), else the per-group tensor."""
    if has_nan:
        return count
    low, high = (float(v) for v in torch.aminmax(count))
    return low if low == high else count


def _others_std(rewards: Tensor, groups: Groups, flagged: Tensor) -> Tensor:
    """For the ``flagged`` entries (layout bool, at most one row per group and component):
    the unbiased std of the group's other scored entries of that component, two-pass, in the
    rewards' units; broadcast against the layout (other entries: undefined). Only the groups
    with a flagged entry are looked at."""
    flat = groups.unrows(flagged)  # [N, K]
    with_flag = groups.flat_groups(groups.total(flagged.to(rewards.dtype)) > 0).any(dim=1)
    members = groups.gather(with_flag).nonzero().flatten()
    subset = make_groups(groups.index[members], members.numel(), device=rewards.device)
    masked = rewards[members].masked_fill(flat[members], float("nan"))
    moments = group_moments(masked, subset)
    std = moments.std(1)
    if moments.scale is not None:
        std = std / moments.scale
    per_group = torch.zeros(groups.num_groups, rewards.shape[1], dtype=std.dtype, device=rewards.device)
    per_group[groups.index[members[subset.first]]] = subset.flat_groups(std)
    return groups.spread(groups.layout_groups(per_group))


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {
        "leave_one_out": lambda v: check_bool(v, "leave_one_out", "gdpo_loo"),
        "eps": lambda v: eps_option(v, "gdpo_loo"),
        "batch_norm": lambda v: check_bool(v, "batch_norm", "gdpo_loo"),
    })


@register_estimator("gdpo_loo", combine="normalize_then_sum", batch_norm=True, validate=_validate)
def gdpo_loo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    leave_one_out: bool = True,
    eps: float = 1e-6,
    batch_norm: bool = True,
) -> Tensor:
    """NeMo-RL's GDPO: per-component (leave-one-out) baselines and stds, summed, whitened.

    Per component k and group: ``b_ik`` is the mean of the group's *other* rows
    (``leave_one_out``, RLOO's baseline) or of all its rows, ``s_ik`` the unbiased std of those
    same rows, ``a_ik = (r_ik − b_ik)/(s_ik + eps)`` where ``s_ik > 0`` and ``r_ik − b_ik``
    where ``s_ik = 0``; ``A_i = Σ_k w_k a_ik``; then ``(A − mean)/std`` over the scored
    rollouts (unbiased std, no eps), or ``A − mean`` (zeros) when that std is 0.

    Source: ``GDPOAdvantageEstimator`` of NVIDIA NeMo-RL (``nemo_rl/algorithms/
    advantage_estimator.py`` with ``calculate_baseline_and_std_per_prompt``), which follows
    GDPO (arXiv 2601.05242). Its ``use_leave_one_out_baseline`` defaults to true (this
    ``leave_one_out``); the GDPO configs NeMo-RL ships set it to false.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored: left out of that component's
            baseline and std, and contributes 0 (NeMo-RL has no missing scores).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]`` ``w_k``, used as given (any sign; NeMo-RL's ``reward_weights``).
        leave_one_out: baseline and std from the other rows (default, NeMo-RL's default) or
            from the whole group.
        eps: added to ``s_ik`` where it is > 0 (NeMo-RL's 1e-6).
        batch_norm: end with the whitening (NeMo-RL does).

    Returns:
        ``[N]`` in the computing dtype. A group of one (one scored row of a component) gives
        0 for that component; with ``leave_one_out`` a group of two has ``s = 0`` (one other
        row), so each row gets the plain difference ``r_ik − r_jk``. Differences from NeMo-RL:
        the others' std is exact (NeMo-RL's one-pass variance can leave a positive residue
        where the others are all equal and then divides by ~1e-6; see :func:`loo_scores`);
        the batch step runs over the scored rollouts only and gives exact zeros when they are
        all equal (NeMo-RL leaves the rounding of the mean). A rollout with every component
        NaN gets 0.
    """
    check_bool(leave_one_out, "leave_one_out", "gdpo_loo")
    eps = eps_option(eps, "gdpo_loo")
    check_bool(batch_norm, "batch_norm", "gdpo_loo")
    scores, has_nan = loo_scores(rewards, groups, leave_one_out, eps)
    summed = groups.combine(scores, weights.to(scores.dtype))
    if not bool(torch.isfinite(summed.sum())):
        if rewards.dtype == torch.float32:  # a score beyond float32 (a tiny s): again in float64
            return gdpo_loo(rewards.double(), groups, weights, leave_one_out=leave_one_out, eps=eps, batch_norm=batch_norm)
        raise InputError(
            "gdpo_loo: the weighted sum of the per-component scores overflows float64 (a reward difference over "
            "s + eps where s is tiny): rescale the rewards"
        )
    scored = ~torch.isnan(rewards).all(dim=1) if has_nan else None
    if not batch_norm:
        return summed if scored is None else torch.where(scored, summed, torch.zeros_like(summed))
    return batch_standardize(summed, scored, 1, 0.0)
