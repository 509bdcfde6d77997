"""GRPO: sum the weighted components, then normalize within the group.

Shao et al. 2024 (DeepSeekMath), as implemented by TRL 1.16 ``multi_objective_aggregation=
"sum_then_normalize"``; ``scale="none"`` is Dr. GRPO (Liu et al. 2025, arXiv 2503.20783).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.estimators._checks import check_choice, check_ddof, check_eps, check_given
from mrgrpo.errors import InputError
from mrgrpo.estimators.groups import (
    CHUNK_ROWS,
    SAFE_SUM_SQ,
    Groups,
    group_moments,
    group_zscores_1d,
    pow2_scale,
    standardize,
    workspace,
)
from mrgrpo.estimators.registry import check_reward_values, register_estimator, zero_unscored

SCALES = ("group", "batch", "none")


def weighted_total(rewards: Tensor, weights: Tensor, has_nan: bool | None = None) -> Tensor:
    """``T_i = Σ_k w_k r_ik`` ``[N]`` float64; NaN components count as 0 (TRL's ``nansum``), and
    a row with every component NaN stays NaN so group statistics skip it. ``has_nan``: whether
    ``rewards`` hold a NaN, if already known (else it is looked up).

    Computed in float64 whatever the input dtype (one column: cheap, and free of the
    cancellation a float32 sum would bring into the centered total). A row whose sum overflows
    float64 is recomputed with its values divided by a power of two; if the total itself does
    not fit in float64, an :class:`~mrgrpo.errors.InputError` names the overflow.
    """
    if has_nan is None:
        has_nan = bool(torch.isnan(rewards.sum()))
    filled = torch.nan_to_num(rewards, nan=0.0) if has_nan else rewards
    total = _matvec64(filled, weights)
    if not bool(torch.isfinite(total.sum())) and not bool(torch.isfinite(total).all()):
        filled = filled.to(torch.float64)
        factors = pow2_scale(filled.abs().amax(dim=1))
        partial = (filled * factors[0].unsqueeze(1) * factors[1].unsqueeze(1)) @ weights
        total = partial / factors[0] / factors[1]
        if not bool(torch.isfinite(total).all()):
            row = int((~torch.isfinite(total)).nonzero()[0, 0])
            raise InputError(
                f"the weighted total of the rewards overflows float64 (first at row {row}): "
                "rescale the rewards or the weights"
            )
    if has_nan:
        total.masked_fill_(torch.isnan(rewards).all(dim=1), float("nan"))
    return total


#: Rows per chunk of :func:`_matvec64`: larger than ``CHUNK_ROWS`` because the per-chunk
#: dispatch, not the cache, bounds it (32,768 rows x 7 float64 = 1.8 MB, inside a 2 MB L2: at
#: N = 262,144 measured best with the caches flushed before each call, 1.19 ms against 1.27 ms
#: for 65,536 and 1.53 ms for 8,192, and within 3% of the best with warm caches).
MATVEC_CHUNK_ROWS = 32768


def _matvec64(x: Tensor, w: Tensor, out: Tensor | None = None) -> Tensor:
    """``x @ w`` in float64 ``[N]`` (into ``out`` if given), converting float32 ``x`` chunk by
    chunk (no float64 copy of the whole matrix: the conversion, not the product, is what costs)."""
    if x.dtype == torch.float64 or x.device.type != "cpu" or x.shape[0] <= MATVEC_CHUNK_ROWS:
        return torch.mv(x.to(torch.float64), w, out=out)
    if out is None:
        out = torch.empty(x.shape[0], dtype=torch.float64)
    buffer = workspace(MATVEC_CHUNK_ROWS, x.shape[1], torch.float64)
    for start in range(0, x.shape[0], MATVEC_CHUNK_ROWS):
        stop = min(start + MATVEC_CHUNK_ROWS, x.shape[0])
        chunk = buffer[: stop - start]
        chunk.copy_(x[start:stop])
        torch.mv(chunk, w, out=out[start:stop])
    return out


def _check_grpo_options(options: dict[str, Any], num_components: int | None) -> None:
    check_given(
        options, "grpo",
        scale=lambda v, e: check_choice(v, "scale", SCALES, e), eps=check_eps, ddof=check_ddof,
    )


def _group_scale(weighted_centered: Tensor, groups: Groups) -> Tensor:
    """GRPO's scale of each group's centered total at its defaults: ``1/(std_g T + 1e-4)``
    (ddof=1), ``[num_groups]`` (the ``group_scale`` trait)."""
    total = weighted_centered.sum(dim=1)
    var = groups.sum(total * total) / (groups.sizes.to(total.dtype) - 1).clamp(min=1)
    return 1.0 / (var.sqrt() + grpo.__kwdefaults__["eps"])


@register_estimator(
    "grpo",
    screens_rewards=True,
    combine="sum_then_normalize",
    scale_option="scale",
    trl_default="sum_then_normalize",
    validate=_check_grpo_options,
    group_scale=_group_scale,
)
def grpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    scale: str = "group",
    eps: float = 1e-4,
    ddof: int = 1,
) -> Tensor:
    """GRPO advantage ``A_i = (T_i − mean_g T) / (std T + eps)``, with ``T = Σ_k w_k r_k``.

    Args:
        rewards: ``[N, K]`` float32 or float64, NaN = not scored (counts as 0 in ``T``); ±inf
            raises an :class:`~mrgrpo.errors.InputError` (checked here: see below).
        groups: group of each rollout.
        weights: ``[K]`` float64.
        scale: ``"group"`` — std of ``T`` within the group (default, TRL's ``scale_rewards=
            "group"``); ``"batch"`` — std of ``T`` over all scored rollouts of the batch (TRL's
            ``"batch"``; the mean stays per group); ``"none"`` — no division (Dr. GRPO).
        eps: added to the std (not under a square root); TRL uses 1e-4.
        ddof: delta degrees of freedom of the std; 1 (unbiased, ``torch.std``) matches TRL.

    Returns:
        ``[N]``: the total ``T`` is always formed in float64 (a float32 sum of components near a
        common offset would cancel); float64 inputs give float64, float32 inputs float32 (their
        within-group differences computed from the float64 total). A group of one rollout, or
        whose total is constant, gives exact zeros, and so does a rollout whose every component
        is NaN. Shuffled or ragged groups on the CPU take a two-pass form checked exact per
        group (see ``_index_layout_two_pass``) or the member-shifted form.

    The rewards are screened for ±inf and NaN by the total itself where it can be (registered
    with ``screens_rewards=True``): with every weight nonzero, a row holding NaN or ±inf has a
    non-finite total, so finite group sums prove the batch finite; any other case (a zero
    weight, a non-finite sum, another layout or device) runs the full check first.
    """
    check_choice(scale, "scale", SCALES, "grpo")
    eps = check_eps(eps, "grpo")
    ddof = check_ddof(ddof, "grpo")
    # None: not looked at yet. A zero weight would hide its column's values from the total.
    has_nan = None if bool(weights.all()) else check_reward_values(rewards)
    if groups.block_size is None and scale != "batch" and rewards.device.type == "cpu" and not has_nan:
        result, finite = None, True
        if scale == "group" and eps > 0:
            result, finite = _index_layout_two_pass(rewards, groups, weights, eps, ddof)
        if result is None and finite:
            result, finite = _index_layout_grpo(rewards, groups, weights, scale, eps, ddof)
        if result is not None:
            return result
        if finite:
            has_nan = False  # only the magnitudes send this batch to the general path
    if has_nan is None:
        has_nan = check_reward_values(rewards)
    if rewards.dtype == torch.float32 and scale != "batch" and not has_nan:
        shifted = _shifted_total32(rewards, groups, weights)
        if shifted is not None:
            moments = group_moments(shifted.unsqueeze(1), groups, sum_sq=scale != "none", shifted=True)
            return groups.per_row(moments.unscaled() if scale == "none" else moments.zscores(eps, ddof))
    total = weighted_total(rewards, weights, has_nan)
    if scale == "batch":
        advantages = _batch_scaled(total, groups, eps, ddof)
    elif scale == "none":
        advantages = groups.per_row(group_moments(total.unsqueeze(1), groups, sum_sq=False).unscaled())
    else:
        advantages = group_zscores_1d(total, groups, eps, ddof)
    return zero_unscored(advantages, rewards) if has_nan else advantages


#: Unit roundoff of float64.
_U64 = 2.0**-53


def _index_layout_two_pass(
    rewards: Tensor, groups: Groups, weights: Tensor, eps: float, ddof: int
) -> tuple[Tensor | None, bool]:
    """GRPO (``scale="group"``, ``eps > 0``) for the index layout on the CPU in two passes:
    ``c = T − mean_g T`` (float64), then ``c / (std_g + eps)``; a ``None`` result hands the
    batch to :func:`_index_layout_grpo` (the member-shifted form, exact in every case), or, if
    the second value (every total finite) is False, to the general path.

    Cheaper than the member shift by one scatter and one gather, and exact where it answers:
    with ``μ_g`` the rounding bound of the group's float64 mean (``n·u·(|mean| + rms(c))``,
    ``u = 2⁻⁵³``), a group whose centered values stay within ``2μ_g`` is constant up to the
    rounding of its own mean and gets exact zeros (its true advantage is at most
    ``2μ_g/eps`` in size); every other group must have ``μ_g ≤ 1e-8·(std_g + eps)``, so that
    the rounding moves no advantage by more than 1e-8 — if one does not (a spread below about
    1e-8 of the group's magnitude), or if the squares leave ``SAFE_SUM_SQ``, or on NaN, the
    answer comes from the member-shifted form instead.
    """
    n, index = rewards.shape[0], groups.index
    c = _matvec64(rewards, weights, out=_scratch(n, 0))
    sums = c.new_zeros(groups.num_groups).scatter_add_(0, index, c)
    if not bool(torch.isfinite(sums.sum())):  # NaN or ±inf in the rewards, or an overflow
        return None, False
    smallest, largest = (int(v) for v in torch.aminmax(groups.sizes))
    # One group size (the usual batch: G samples per prompt): per-group constants are scalars.
    count: Tensor | float = float(largest) if smallest == largest else groups.sizes.to(torch.float64)
    mean = sums.mul_(1.0 / count) if isinstance(count, float) else sums.div_(count)
    c.sub_(torch.index_select(mean, 0, index, out=_scratch(n, 1)))
    squares = c.new_zeros(groups.num_groups).scatter_add_(0, index, c * c)
    if not _two_pass_in_range(squares, mean):
        return None, True
    # μ_g² ≤ 2·n·u²·spread_g with spread_g = Σc² + n·mean² (no square roots needed).
    spread = torch.addcmul(squares, mean, mean, value=count) if isinstance(count, float) else squares + count * mean * mean
    constant = squares <= spread * (8 * _U64 * _U64 * count * count)
    dof = count - ddof
    if smallest > ddof:
        # Guard: μ_g ≤ 1e-8·(std_g + eps) for every other group, via (std + eps)² ≥ var + eps².
        guard_ok = squares >= spread * (2e16 * _U64 * _U64 * count * dof) - dof * eps * eps
        variance = squares.div_(dof)
    else:
        positive = dof > 0 if isinstance(dof, Tensor) else torch.full_like(squares, dof > 0, dtype=torch.bool)
        safe_dof = dof.clamp(min=1) if isinstance(dof, Tensor) else max(dof, 1.0)
        variance = torch.where(positive, squares / safe_dof, torch.zeros_like(squares))
        guard_ok = (variance + eps * eps) * 1e-16 >= spread * (2 * _U64 * _U64 * count)
    if not bool((guard_ok | constant).all()):
        return None, True
    inverse = variance.sqrt_().add_(eps).reciprocal_().masked_fill_(constant, 0.0)
    return torch.mul(c, torch.index_select(inverse, 0, index, out=_scratch(n, 1)), out=_new(c, rewards.dtype)), True


def _two_pass_in_range(squares: Tensor, mean: Tensor) -> bool:
    """Magnitudes inside which the two-pass form's tests are exact: no square overflows
    (``mean² · n`` included) and none underflows unseen. A square that underflowed to 0 marks
    its group constant, which is exact to 1e-8 of the batch's largest advantage as long as some
    group's sum of squares is normal (≥ 2⁻⁹⁰⁰); a batch with none goes to the member shift."""
    low, high = SAFE_SUM_SQ[torch.float64]
    smallest, largest = (float(v) for v in torch.aminmax(squares))
    lowest_mean, highest_mean = (float(v) for v in torch.aminmax(mean))
    if not (largest <= high and max(-lowest_mean, highest_mean) <= 2.0**500 and largest >= 2.0**-900):
        return False
    return smallest >= low or not bool(((squares < low) & (squares > 0)).any())


def _index_layout_grpo(
    rewards: Tensor, groups: Groups, weights: Tensor, scale: str, eps: float, ddof: int
) -> tuple[Tensor | None, bool]:
    """GRPO / Dr. GRPO for the index layout (shuffled or ragged groups) on the CPU, ``[N]`` in
    the input's dtype, in the fewest passes over the rollouts, and whether every total was
    finite; a ``None`` result sends the batch to the general path (NaN or ±inf, an overflow, or
    magnitudes whose squares leave ``SAFE_SUM_SQ``).

    The total ``T`` is float64, shifted by one member of its group (``d = T − T_member``: exact
    zeros for a constant group, and no cancellation in what follows); the moments come from
    one pass of segment sums of ``d`` and ``d²`` (``Σd² − (Σd)²/n``: with the shift this is
    accurate to about ``n²·2⁻⁵³`` relative), and the output, ``(d − mean)/(std + eps)`` in
    float64, is rounded once to the input's dtype. The float64 temporaries live in reused
    scratch buffers: fresh memory (page faults) would cost more than the arithmetic.
    """
    n, index = rewards.shape[0], groups.index
    d = _matvec64(rewards, weights, out=_scratch(n, 0))
    # Any member serves as the shift: on the CPU a 1-D scatter runs in order, so the last
    # member wins on every run (same bits every time).
    member = d.new_empty(groups.num_groups).scatter_(0, index, d)
    gathered = _scratch(n, 1)
    d.sub_(torch.index_select(member, 0, index, out=gathered))
    # (scatter_add_ rather than index_add_: the same sums, measured 1.6x faster on the CPU)
    sums = d.new_zeros(groups.num_groups).scatter_add_(0, index, d)
    if not bool(torch.isfinite(sums.sum())):  # NaN or ±inf in the rewards, or an overflow
        return None, False
    smallest, largest = (int(v) for v in torch.aminmax(groups.sizes))
    if scale == "none":
        mean = sums.mul_(1.0 / largest) if smallest == largest else sums.div_(groups.sizes)
        return torch.sub(d, torch.index_select(mean, 0, index, out=gathered), out=_new(d, rewards.dtype)), True
    count = groups.sizes.to(torch.float64)
    mean = sums / count
    squares = d.new_zeros(groups.num_groups).scatter_add_(0, index, d * d)
    if not _safe_sum_sq(squares, sums):
        return None, True
    # In place on the [num_groups] statistics (each fresh temporary costs as much as the op).
    inverse = torch.addcmul(squares, sums, mean, value=-1.0).clamp_(min=0.0)  # Σ(d − mean)²
    dof = count.sub_(ddof)
    if bool((dof > 0).all()):
        inverse.div_(dof).sqrt_()
    else:
        inverse = torch.where(dof > 0, inverse / dof.clamp(min=1), torch.zeros_like(inverse)).sqrt_()
    inverse.add_(eps)
    if eps > 0:
        inverse.reciprocal_()
    else:  # std + eps = 0 only for a constant group, where d − mean = 0 anyway
        inverse = torch.where(inverse > 0, inverse.reciprocal(), torch.zeros_like(inverse))
    # A constant group has d = mean = 0 exactly, hence exact zeros.
    d.sub_(torch.index_select(mean, 0, index, out=gathered))
    return torch.mul(d, torch.index_select(inverse, 0, index, out=gathered), out=_new(d, rewards.dtype)), True


#: Largest batch whose float64 scratch vectors live in reused per-thread buffers (2 x 32 MiB);
#: a larger one gets fresh memory, so a one-off huge batch does not pin its size for the
#: thread's lifetime.
_REUSED_SCRATCH_ROWS = 2**22


def _scratch(n: int, slot: int) -> Tensor:
    """``[n]`` float64 scratch vector number ``slot`` (0: the weighted total, 1: a gathered
    per-group statistic); contents undefined, never returned to callers. Fresh memory would
    cost more than the arithmetic on it (page faults on every call)."""
    if n <= _REUSED_SCRATCH_ROWS:
        return workspace(2, n, torch.float64)[slot]
    return torch.empty(n, dtype=torch.float64)


def _new(scratch: Tensor, dtype: torch.dtype) -> Tensor:
    """A fresh output ``[n]`` of ``dtype`` for the last operation on ``scratch``: writing the
    float64 result straight into it rounds once, as a separate cast would, without the pass."""
    return torch.empty(scratch.shape[0], dtype=dtype)


def _safe_sum_sq(squares: Tensor, sums: Tensor) -> bool:
    """Per-group float64 sums of squares inside ``SAFE_SUM_SQ`` (an exact 0 of a constant group
    is safe; one that underflowed although the values differ is not)."""
    low, high = SAFE_SUM_SQ[torch.float64]
    smallest, largest = (float(v) for v in torch.aminmax(squares))
    if not largest <= high:
        return False
    if smallest >= low:
        return True
    return not bool(((squares < low) & ((squares > 0) | (sums != 0))).any())


def _shifted_total32(rewards: Tensor, groups: Groups, weights: Tensor) -> Tensor | None:
    """``T_i − T_first(g)`` ``[N]`` float32 for contiguous blocks, with ``T`` computed in float64
    (so the shift, where a float32 total would cancel, is exact) and only the difference, of
    the groups' spread scale, rounded to float32. ``None`` when the float64 path must be taken
    instead (another layout or device, or magnitudes a float32 difference cannot hold). The
    rewards must hold no NaN (the caller checks)."""
    if groups.block_size is None or rewards.device.type != "cpu":
        return None
    n, g = rewards.shape[0], groups.block_size
    out = torch.empty(n, dtype=torch.float32)
    rows = max(g, CHUNK_ROWS // g * g)
    buffer = workspace(rows, rewards.shape[1], torch.float64)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        chunk = buffer[: stop - start]
        chunk.copy_(rewards[start:stop])
        total = torch.mv(chunk, weights).view(-1, g)
        out[start:stop].view(-1, g).copy_(total - total[:, :1])
    if not bool(torch.isfinite(out.sum())):
        return None
    return out


def _batch_scaled(total: Tensor, groups: Groups, eps: float, ddof: int) -> Tensor:
    """``(T − mean_g T) / (std_batch T + eps)``, computed on ``T`` divided by a power of two
    near its largest magnitude (so the batch's squares cannot overflow)."""
    scored = ~torch.isnan(total)
    kept = total[scored]
    n = kept.numel()
    if n == 0:
        return torch.zeros_like(total)
    factors = pow2_scale(kept.abs().amax())
    factor = factors[0] * factors[1]
    unit = total * factors[0] * factors[1]
    centered = groups.per_row(group_moments(unit.unsqueeze(1), groups, sum_sq=False).unscaled())
    kept = unit[scored]
    spread = kept - kept.mean()
    std = ((spread * spread).sum() / (n - ddof)).sqrt() if n > ddof else kept.new_zeros(())
    return standardize(centered, std + eps * factor)
