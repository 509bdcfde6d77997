"""GRPO: sum the weighted components, then normalize within the group.

Shao et al. 2024 (DeepSeekMath), as implemented by TRL 1.16 ``multi_objective_aggregation=
"sum_then_normalize"``; ``scale="none"`` is Dr. GRPO (Liu et al. 2025, arXiv 2503.20783).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.estimators._checks import check_choice, check_ddof, check_eps
from mrgrpo.errors import InputError
from mrgrpo.estimators.groups import (
    CHUNK_ROWS,
    Groups,
    group_moments,
    group_zscores_1d,
    pow2_scale,
    standardize,
    workspace,
)
from mrgrpo.estimators.registry import register_estimator

SCALES = ("group", "batch", "none")


def weighted_total(rewards: Tensor, weights: Tensor) -> Tensor:
    """``T_i = Σ_k w_k r_ik`` ``[N]`` float64; NaN components count as 0 (TRL's ``nansum``), and
    a row with every component NaN stays NaN so group statistics skip it.

    Computed in float64 whatever the input dtype (one column: cheap, and free of the
    cancellation a float32 sum would bring into the centered total). A row whose sum overflows
    float64 is recomputed with its values divided by a power of two; if the total itself does
    not fit in float64, an :class:`~mrgrpo.errors.InputError` names the overflow.
    """
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


def _matvec64(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` in float64 ``[N]``, converting float32 ``x`` chunk by chunk (no float64 copy of
    the whole matrix: the conversion, not the product, is what costs)."""
    if x.dtype == torch.float64 or x.device.type != "cpu" or x.shape[0] <= CHUNK_ROWS:
        return torch.mv(x.to(torch.float64), w)
    out = torch.empty(x.shape[0], dtype=torch.float64)
    buffer = workspace(CHUNK_ROWS, x.shape[1], torch.float64)
    for start in range(0, x.shape[0], CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, x.shape[0])
        chunk = buffer[: stop - start]
        chunk.copy_(x[start:stop])
        torch.mv(chunk, w, out=out[start:stop])
    return out


@register_estimator("grpo")
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
        rewards: ``[N, K]`` float32 or float64, NaN = not scored (counts as 0 in ``T``).
        groups: group of each rollout.
        weights: ``[K]`` float64.
        scale: ``"group"`` — std of ``T`` within the group (default, TRL's ``scale_rewards=
            "group"``); ``"batch"`` — std of ``T`` over all scored rollouts of the batch (TRL's
            ``"batch"``; the mean stays per group); ``"none"`` — no division (Dr. GRPO).
        eps: added to the std (not under a square root); TRL uses 1e-4.
        ddof: delta degrees of freedom of the std; 1 (unbiased, ``torch.std``) matches TRL.

    Returns:
        ``[N]`` float64 (the total and its moments are float64). A group of one rollout, or
        whose total is constant, gives exact zeros.
    """
    check_choice(scale, "scale", SCALES, "grpo")
    eps = check_eps(eps, "grpo")
    ddof = check_ddof(ddof, "grpo")
    if rewards.dtype == torch.float32 and scale != "batch":
        shifted = _shifted_total32(rewards, groups, weights)
        if shifted is not None:
            moments = group_moments(shifted.unsqueeze(1), groups, sum_sq=scale != "none", shifted=True)
            return groups.per_row(moments.unscaled() if scale == "none" else moments.zscores(eps, ddof))
    total = weighted_total(rewards, weights)
    if scale == "batch":
        return _batch_scaled(total, groups, eps, ddof)
    if scale == "none":
        return groups.per_row(group_moments(total.unsqueeze(1), groups, sum_sq=False).unscaled())
    return group_zscores_1d(total, groups, eps, ddof)


def _shifted_total32(rewards: Tensor, groups: Groups, weights: Tensor) -> Tensor | None:
    """``T_i − T_first(g)`` ``[N]`` float32, with ``T`` computed in float64 (so the shift, where a
    float32 total would cancel, is exact) and only the difference, of the groups' spread
    scale, rounded to float32. ``None`` when the float64 path must be taken instead (NaN, or
    magnitudes a float32 difference cannot hold)."""
    if rewards.device.type != "cpu" or bool(torch.isnan(rewards.sum())):
        return None
    n = rewards.shape[0]
    out = torch.empty(n, dtype=torch.float32)
    if groups.block_size is not None:
        g = groups.block_size
        rows = max(g, CHUNK_ROWS // g * g)
        buffer = workspace(rows, rewards.shape[1], torch.float64)
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            chunk = buffer[: stop - start]
            chunk.copy_(rewards[start:stop])
            total = torch.mv(chunk, weights).view(-1, g)
            out[start:stop].view(-1, g).copy_(total - total[:, :1])
    else:
        total = _matvec64(rewards, weights)
        # Any member's total serves as the shift (a constant group then gives exact zeros):
        # a scatter writes one per group directly; on the CPU a 1-D scatter runs in order, so
        # the last member wins on every run (same bits every time).
        first = torch.empty(groups.num_groups, dtype=torch.float64).scatter_(0, groups.index, total)
        buffer = workspace(1, min(n, CHUNK_ROWS), torch.float64)[0]
        for start in range(0, n, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, n)
            chunk = buffer[: stop - start]
            torch.index_select(first, 0, groups.index[start:stop], out=chunk)
            torch.sub(total[start:stop], chunk, out=chunk)
            out[start:stop].copy_(chunk)
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
