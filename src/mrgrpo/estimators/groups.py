"""Group bookkeeping and NaN-aware within-group statistics, vectorized over all groups.

Every estimator needs the same few reductions "per group, per component": counts, means,
centered values and standard deviations. They are computed here once, for all groups at the
same time, with segment sums (``index_add_``) over a group index, or with a reshape to
``[num_groups, G, ...]`` when the groups are contiguous blocks of equal size (TRL's layout),
which is faster and gives identical results.

Shapes: N rollouts, K components, ``num_groups`` groups.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Groups:
    """Which group each of N rollouts belongs to.

    Attributes:
        index: ``[N]`` int64 in ``[0, num_groups)`` (the numbering carries no meaning).
        num_groups: number of distinct groups.
        block_size: ``G`` when the rollouts are laid out as contiguous blocks of ``G`` rows per
            group (then ``index == arange(num_groups).repeat_interleave(G)``), else ``None``.
    """

    index: Tensor
    num_groups: int
    block_size: int | None = None

    @property
    def num_rollouts(self) -> int:
        return int(self.index.numel())

    def sum(self, x: Tensor) -> Tensor:
        """Per-group sum. ``x``: ``[N, ...]`` -> ``[num_groups, ...]``."""
        if self.block_size is not None:
            return x.reshape(self.num_groups, self.block_size, *x.shape[1:]).sum(dim=1)
        out = x.new_zeros((self.num_groups, *x.shape[1:]))
        return out.index_add_(0, self.index, x)

    def amax(self, x: Tensor) -> Tensor:
        """Per-group maximum (``-inf`` for an empty group). ``[N, ...]`` -> ``[num_groups, ...]``."""
        return self._extreme(x, "amax")

    def amin(self, x: Tensor) -> Tensor:
        """Per-group minimum (``+inf`` for an empty group)."""
        return self._extreme(x, "amin")

    def _extreme(self, x: Tensor, reduce: str) -> Tensor:
        if self.block_size is not None:
            blocks = x.reshape(self.num_groups, self.block_size, *x.shape[1:])
            return blocks.amax(dim=1) if reduce == "amax" else blocks.amin(dim=1)
        fill = float("-inf") if reduce == "amax" else float("inf")
        out = x.new_full((self.num_groups, *x.shape[1:]), fill)
        index = self.index.view(-1, *([1] * (x.dim() - 1))).expand_as(x)
        return out.scatter_reduce_(0, index, x, reduce=reduce, include_self=True)

    @cached_property
    def sizes(self) -> Tensor:
        """``[num_groups]`` int64 number of rollouts per group."""
        if self.block_size is not None:
            return torch.full((self.num_groups,), self.block_size, dtype=torch.int64, device=self.index.device)
        return torch.bincount(self.index, minlength=self.num_groups)

    def gather(self, per_group: Tensor) -> Tensor:
        """Broadcast a per-group statistic back to rollouts: ``[num_groups, ...]`` -> ``[N, ...]``."""
        if self.block_size is not None:
            expanded = per_group.unsqueeze(1).expand(self.num_groups, self.block_size, *per_group.shape[1:])
            return expanded.reshape(self.num_rollouts, *per_group.shape[1:])
        return per_group.index_select(0, self.index)


def make_groups(group_ids: Any, num_rollouts: int, device: torch.device | None = None) -> Groups:
    """Build :class:`Groups` from ``group_ids``.

    ``group_ids`` may be an integer/bool tensor or numpy array, a sequence of ints, or a
    sequence of any hashables (strings such as verl's ``uid``s, tuples, ...). Groups may differ
    in size and need not be contiguous.

    Raises:
        ValueError: wrong length, not one-dimensional, floating-point ids, unhashable ids.
    """
    ids = _ids_as_int_tensor(group_ids)
    if ids.dim() != 1:
        raise ValueError(
            f"group_ids must be one-dimensional [N], got shape {tuple(ids.shape)}: pass one id per rollout"
        )
    if ids.numel() != num_rollouts:
        raise ValueError(
            f"group_ids has {ids.numel()} entries but rewards has {num_rollouts} rows: pass one group id per rollout"
        )
    if device is not None:
        ids = ids.to(device)
    if num_rollouts == 0:
        return Groups(ids.to(torch.int64), 0, None)

    block_size = _contiguous_block_size(ids)
    if block_size is not None:
        num_groups = num_rollouts // block_size
        index = torch.arange(num_groups, device=ids.device).repeat_interleave(block_size)
        return Groups(index, num_groups, block_size)
    index, num_groups = _dense_codes(ids)
    return Groups(index, num_groups, None)


def _dense_codes(ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary int64 ids to codes ``0..num_groups-1`` (numbering is irrelevant to results)."""
    low, high = int(ids.min()), int(ids.max())
    span = high - low + 1
    if span <= 4 * ids.numel() + 1024:
        # Compact id range (the usual case): a bincount is O(N + span), far faster than sorting.
        shifted = ids - low
        present = torch.bincount(shifted, minlength=span) > 0
        codes = torch.cumsum(present, dim=0) - 1
        return codes[shifted], int(present.sum())
    _, inverse = np.unique(ids.cpu().numpy(), return_inverse=True)
    inverse = torch.from_numpy(inverse.reshape(-1).astype(np.int64)).to(ids.device)
    return inverse, int(inverse.max()) + 1


def _contiguous_block_size(ids: Tensor) -> int | None:
    """``G`` if ``ids`` is contiguous runs of ``G`` rows, each run a different group, else None."""
    n = ids.numel()
    starts = torch.nonzero(ids[1:] != ids[:-1]).flatten() + 1
    num_blocks = starts.numel() + 1
    if n % num_blocks:
        return None
    size = n // num_blocks
    if not bool((starts == torch.arange(1, num_blocks, device=ids.device) * size).all()):
        return None
    block_ids = ids[::size]
    # Runs are distinct groups only if no id comes back in a later run.
    _, count = _dense_codes(block_ids)
    return size if count == num_blocks else None


def _ids_as_int_tensor(group_ids: Any) -> Tensor:
    if isinstance(group_ids, Tensor):
        if group_ids.is_floating_point() or group_ids.is_complex():
            raise ValueError(
                "group_ids must be integers or hashable ids, got a floating-point tensor: "
                "convert with .long() if the values are whole numbers"
            )
        return group_ids.to(torch.int64)
    if isinstance(group_ids, np.ndarray):
        if group_ids.dtype.kind in "iub":
            return torch.from_numpy(group_ids.astype(np.int64, copy=False))
        if group_ids.dtype.kind in "fc":
            raise ValueError(
                "group_ids must be integers or hashable ids, got a floating-point array: "
                "convert with .astype(int) if the values are whole numbers"
            )
        group_ids = group_ids.tolist()
    if isinstance(group_ids, (str, bytes)) or not isinstance(group_ids, Sequence):
        try:
            group_ids = list(group_ids)
        except TypeError:
            raise ValueError(
                f"group_ids must be a sequence with one id per rollout, got {type(group_ids).__name__}"
            ) from None
    if all(type(g) is int for g in group_ids):
        return torch.tensor(group_ids, dtype=torch.int64)
    if any(isinstance(g, float) for g in group_ids):
        raise ValueError("group_ids must be integers or hashable ids, not floats: use ints or strings")
    codes: dict[Hashable, int] = {}
    try:
        encoded = [codes.setdefault(g, len(codes)) for g in group_ids]
    except TypeError as error:
        raise ValueError(f"group_ids must be hashable (ints, strings, tuples): {error}") from None
    return torch.tensor(encoded, dtype=torch.int64)


@dataclass(frozen=True)
class GroupMoments:
    """Within-group, per-column statistics of ``x`` ``[N, C]`` (NaN = missing).

    Attributes:
        present: ``[N, C]`` bool, entry observed.
        count: ``[num_groups, C]`` observed entries per group.
        centered: ``[N, C]``, ``x - group mean``; exactly 0 where missing and wherever the
            column is constant within the group (so constant groups contribute exact zeros, not
            rounding noise).
        sum_sq: ``[num_groups, C]``, sum of squared centered values.
    """

    present: Tensor
    count: Tensor
    centered: Tensor
    sum_sq: Tensor

    def std(self, ddof: int) -> Tensor:
        """``[num_groups, C]`` standard deviation with ``ddof``; 0 where ``count <= ddof``."""
        dof = self.count - ddof
        var = torch.where(dof > 0, self.sum_sq / dof.clamp(min=1), torch.zeros_like(self.sum_sq))
        return var.sqrt()


def group_moments(x: Tensor, groups: Groups) -> GroupMoments:
    """NaN-aware within-group moments of ``x`` ``[N, C]`` (two-pass: mean, then squares)."""
    present = ~torch.isnan(x)
    if bool(present.all()):  # the common case: skip every NaN mask
        count = groups.sizes.to(x.dtype).unsqueeze(1).expand(groups.num_groups, x.shape[1])
        total, high, low = groups.sum(x), groups.amax(x), groups.amin(x)
        keep = groups.gather(high > low)
    else:
        missing = ~present
        count = groups.sum(present.to(x.dtype))
        total = groups.sum(x.masked_fill(missing, 0.0))
        high = groups.amax(x.masked_fill(missing, float("-inf")))
        low = groups.amin(x.masked_fill(missing, float("inf")))
        keep = groups.gather(high > low) & present
    centered = x - groups.gather(total / count.clamp(min=1))
    centered.masked_fill_(~keep, 0.0)  # exact zeros: missing entries and constant columns
    return GroupMoments(present, count, centered, groups.sum(centered * centered))


def standardize(centered: Tensor, std: Tensor, eps: float) -> Tensor:
    """``centered / (std + eps)``; 0 where ``centered`` is 0, also when ``std + eps == 0``.

    ``std + eps`` can only be 0 where the column is constant in the group (``std = 0`` and
    ``eps = 0``), and there ``centered`` is exactly 0, so dividing by 1 instead is exact.
    """
    denominator = std + eps
    return centered / torch.where(denominator > 0, denominator, torch.ones_like(denominator))


def batch_standardize(values: Tensor, scored: Tensor, ddof: int, eps: float) -> Tensor:
    """Normalize ``values`` ``[N]`` by the mean and std over the ``scored`` rows only.

    Unscored rows get 0. Uses ``ddof`` for the std and adds ``eps`` to it (TRL convention).
    If every scored value is equal, every output is exactly 0.
    """
    kept = values[scored]
    n = kept.numel()
    if n == 0:
        return torch.zeros_like(values)
    mean = kept.mean()
    spread = kept - mean
    if bool((kept == kept[0]).all()):
        return torch.zeros_like(values)
    var = (spread * spread).sum() / (n - ddof) if n > ddof else torch.zeros((), dtype=values.dtype, device=values.device)
    out = standardize(values - mean, var.sqrt(), eps)
    return torch.where(scored, out, torch.zeros_like(out))
