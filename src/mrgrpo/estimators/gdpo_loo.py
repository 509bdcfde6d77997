"""GDPO as NVIDIA NeMo-RL implements it: per-component leave-one-out baselines, summed, whitened."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import InputError
from mrgrpo.estimators._checks import check_bool
from mrgrpo.estimators._multi import eps_option, given
from mrgrpo.estimators.groups import SAFE_SUM_SQ, Groups, batch_standardize, group_moments, make_groups
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

    if not leave_one_out:
        std = moments.std(1)
        if moments.scale is not None:  # (extreme magnitudes: back to the rewards' units, in float64)
            d, std = d / groups.spread(moments.scale), std / moments.scale
        return d / rows(torch.where(std > 0, std + eps, torch.ones_like(std))), has_nan
    if isinstance(count, float) and count <= 2:  # every group of two (or one): s = 0
        return d.mul_(2.0 if count == 2 else 0.0) / (1.0 if moments.scale is None else groups.spread(moments.scale)), has_nan
    others = count - 1
    if isinstance(count, float):
        factor, ratio = count / others, (count - 1) / (count * (count - 2))
        base = rows(moments.sum_sq / (count - 2))
        offset: Tensor | float = eps
    else:
        dof = count - 2
        factor = torch.where(others > 0, count / others.clamp(min=1), torch.zeros_like(count))
        # (n − 1)/(n(n − 2)) and M2/(n − 2), 0 where n <= 2 (then s = 0)
        ratio = rows(torch.where(dof > 0, others / (count * dof.clamp(min=1)), torch.zeros_like(count)))
        base = rows(torch.where(dof > 0, moments.sum_sq / dof.clamp(min=1), torch.zeros_like(count)))
        # s + eps, or 1 where a group has two scored entries (s = 0: one other row)
        offset = rows(torch.where(dof > 0, torch.full_like(count, eps), torch.ones_like(count)))
    a = d.mul_(rows(factor))  # (in place: the centered values are not needed again)
    # the others' variance (M2 − d·a)/(n − 2) = M2/(n − 2) − a²(n − 1)/(n(n − 2)), and how far
    # it is above DOWNDATE_SHARE of M2/(n − 2) (below 0: recomputed from the others)
    variance = torch.addcmul(base, a, a, value=-ratio) if isinstance(ratio, float) else base - a * a * ratio
    if groups.block_size is not None and isinstance(ratio, float) and moments.scale is None:
        # Contiguous groups of one size without NaN: only each group's lowest excess decides,
        # min(variance) − DOWNDATE_SHARE·M2/(n − 2) (the same numbers: subtracting one value is
        # monotonic), one reduction instead of a broadcast pass for every entry's excess and a
        # reduction; it belongs to the row farthest from the mean.
        lowest = variance.amin(dim=1, keepdim=True).sub_(base, alpha=DOWNDATE_SHARE)
        flags: Tensor | _Excess = _Excess(lowest, lambda: torch.addcmul(base, a, a, value=-ratio).sub_(base, alpha=DOWNDATE_SHARE))
    else:
        flags = torch.sub(variance, base, alpha=DOWNDATE_SHARE)
    s = variance.sqrt_()  # (NaN where the downdate went below 0: recomputed below)
    if moments.scale is not None:  # (extreme magnitudes: back to the rewards' units, in float64)
        scale = groups.spread(moments.scale)
        a, s = a / scale, s / scale
    # A row with s = 0 needs no division: a = 0 there, except in a group of two (the offset is 1
    # there) or where the others are all equal with the row apart (recomputed below).
    scores = torch.div(a, s.add_(offset), out=s)  # (into s's buffer: no fresh [N, K] tensor)
    if eps == 0:
        scores.nan_to_num_(nan=0.0)
    _recompute_flagged(scores, a, flags, rewards, groups, eps, has_nan)
    return scores, has_nan


class _Excess:
    """The lowest excess of each group and component (``[num_groups, 1, K]``, contiguous groups
    of one size without NaN), with the entries' excess computed only if a fallback needs them."""

    def __init__(self, lowest: Tensor, entries: Any) -> None:
        self.lowest, self._entries = lowest, entries

    def entries(self) -> Tensor:
        return self._entries()


def _recompute_flagged(
    scores: Tensor, a: Tensor, excess: Tensor | _Excess, rewards: Tensor, groups: Groups, eps: float, has_nan: bool
) -> None:
    """Overwrite the ``scores`` (layout) of the entries with ``excess < 0`` (at most one row per
    group and component) with ``a / (s + eps)``, or ``a`` where ``s = 0``, ``s`` the unbiased
    std of the group's other scored entries of that component with that row masked out.

    Groups of one size without NaN (every trainer's batch) take the entries one by one as
    rows of their group's column (:func:`_others_std`); other batches recompute the moments of
    the groups that hold such an entry (:func:`_recompute_members`). ``excess`` may be an
    :class:`_Excess` (each group's lowest; its flagged row is the one farthest from the mean)."""
    if groups.block_size is not None:
        size = groups.block_size
        lowest = isinstance(excess, _Excess)
        per_column = excess.lowest.squeeze(1) if lowest else excess.amin(dim=1)  # [num_groups, K]
        pairs = (per_column < 0).nonzero()
        if not pairs.numel():
            return
        if not has_nan:
            g, k = pairs[:, 0], pairs[:, 1]
            row = a[g, :, k].abs().argmax(dim=1) if lowest else excess[g, :, k].argmin(dim=1)
            std = _others_std(groups.rows(rewards)[g, :, k], row)
            if std is not None:
                scores[g, row, k] = _divide(a[g, row, k], std.to(a.dtype), eps)
                return
        chosen = pairs[:, 0].unique()
        members = (chosen.unsqueeze(1) * size + torch.arange(size, device=chosen.device)).flatten()
        _recompute_members(scores, a, excess.entries() if lowest else excess, rewards, groups, eps, members)
        return
    candidates = (excess.amin(dim=0) < 0).nonzero().flatten()  # (a pass over rows, then a few)
    if not candidates.numel():
        return
    entries = (excess[:, candidates] < 0).nonzero()  # [E, 2]: (component, candidate)
    k, rows = entries[:, 0], candidates[entries[:, 1]]
    chosen = torch.zeros(groups.num_groups, dtype=torch.bool, device=rewards.device)
    chosen[groups.index[rows]] = True
    members = chosen[groups.index].nonzero().flatten()
    blocks = None if has_nan else _member_blocks(groups, members)
    if blocks is not None:
        slot = torch.full((groups.num_groups,), -1, dtype=torch.int64, device=rewards.device)
        slot[groups.index[blocks[:, 0]]] = torch.arange(blocks.shape[0], device=rewards.device)
        columns = blocks[slot[groups.index[rows]]]  # [E, G]: the rows of each entry's group
        std = _others_std(rewards[columns, k.unsqueeze(1)], (columns == rows.unsqueeze(1)).int().argmax(dim=1))
        if std is not None:
            scores[k, rows] = _divide(a[k, rows], std.to(a.dtype), eps)
            return
    _recompute_members(scores, a, excess, rewards, groups, eps, members)


def _member_blocks(groups: Groups, members: Tensor) -> Tensor | None:
    """The rows ``members`` (whole groups of the index layout) as ``[C, G]``, one group a row,
    where their groups all have one size ``G`` (else ``None``)."""
    ids = groups.index[members]
    sizes = groups.sizes[ids]
    if not bool((sizes == sizes[0]).all()):
        return None
    return members[torch.argsort(ids, stable=True)].view(-1, int(sizes[0]))


def _others_std(columns: Tensor, row: Tensor) -> Tensor | None:
    """Unbiased std ``[E]`` of each row of ``columns`` ``[E, G]`` (``G >= 3``, no NaN) without
    its entry ``row`` ``[E]``, from the values shifted by the largest of the others: every
    shifted value is <= 0, so their sums do not cancel, and the others are all equal exactly
    when they are all 0 (then the std is exactly 0). ``None`` where the squares leave the safe
    window (extreme magnitudes): the caller takes the general path."""
    own = torch.arange(columns.shape[1], device=columns.device) == row.unsqueeze(1)
    high = columns.masked_fill(own, float("-inf")).amax(dim=1, keepdim=True)
    shifted = (columns - high).masked_fill_(own, 0.0)
    sums = shifted.sum(dim=1)
    squares = (shifted * shifted).sum(dim=1)
    low, top = SAFE_SUM_SQ[columns.dtype]
    if not bool(squares.max() <= top) or bool(((squares < low) & (sums != 0)).any()):
        return None
    m = columns.shape[1] - 1  # the others
    return ((squares - sums * sums / m).clamp_(min=0.0) / (m - 1)).sqrt_()


def _divide(a: Tensor, std: Tensor, eps: float) -> Tensor:
    """``a / (std + eps)`` where ``std > 0``, ``a`` where ``std = 0``."""
    return a / torch.where(std > 0, std + eps, torch.ones_like(std))


def _recompute_members(
    scores: Tensor, a: Tensor, excess: Tensor, rewards: Tensor, groups: Groups, eps: float, members: Tensor
) -> None:
    """:func:`_recompute_flagged` for the rows ``members`` (whole groups), in any layout."""
    subset = make_groups(groups.index[members], members.numel(), device=rewards.device)
    flat_scores = groups.unrows(scores)
    flagged = groups.unrows(excess)[members] < 0
    moments = group_moments(rewards[members].masked_fill(flagged, float("nan")), subset)
    std = subset.flat_groups(moments.std(1))
    if moments.scale is not None:
        std = std / subset.flat_groups(moments.scale)
    std = subset.gather(std).to(scores.dtype)
    exact = _divide(groups.unrows(a)[members], std, eps)
    flat_scores[members] = torch.where(flagged, exact, flat_scores[members])


def _uniform(count: Tensor, has_nan: bool) -> Tensor | float:
    """The groups' counts of scored entries as one number where they are all equal (no NaN,
    groups of one size), else the per-group tensor."""
    if has_nan:
        return count
    low, high = (float(v) for v in torch.aminmax(count))
    return low if low == high else count


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
    ``leave_one_out``); its GDPO guide sets it to false.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored: left out of that component's
            baseline and std, and contributes 0 (NeMo-RL has no missing scores).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]`` ``w_k`` in the order of the components, used as given (any sign; NeMo-RL's
            ``reward_weights``, which it orders by the components' names).
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
