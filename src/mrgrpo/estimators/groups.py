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
from typing import Any

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Groups:
    """Which group each of N rollouts belongs to.

    Attributes:
        index: ``[N]`` int64 in ``[0, num_groups)``; groups are numbered in order of first
            appearance.
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
        if self.block_size is not None:
            return x.reshape(self.num_groups, self.block_size, *x.shape[1:]).amax(dim=1)
        out = x.new_full((self.num_groups, *x.shape[1:]), float("-inf"))
        index = self.index.view(-1, *([1] * (x.dim() - 1))).expand_as(x)
        return out.scatter_reduce_(0, index, x, reduce="amax", include_self=True)

    def amin(self, x: Tensor) -> Tensor:
        """Per-group minimum (``+inf`` for an empty group)."""
        return -self.amax(-x)

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

    unique, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    num_groups = int(unique.numel())
    block_size = _contiguous_block_size(ids, num_groups)
    if block_size is not None:
        index = torch.arange(num_groups, device=ids.device).repeat_interleave(block_size)
        return Groups(index, num_groups, block_size)
    # Renumber in order of first appearance so results never depend on the ids' sort order.
    first_seen = torch.full((num_groups,), num_rollouts, dtype=torch.int64, device=ids.device)
    positions = torch.arange(num_rollouts, device=ids.device)
    first_seen.scatter_reduce_(0, inverse, positions, reduce="amin", include_self=True)
    rank = torch.empty_like(first_seen)
    rank[torch.argsort(first_seen)] = torch.arange(num_groups, device=ids.device)
    return Groups(rank[inverse], num_groups, None)


def _contiguous_block_size(ids: Tensor, num_groups: int) -> int | None:
    n = ids.numel()
    if n % num_groups:
        return None
    size = n // num_groups
    blocks = ids.view(num_groups, size)
    if bool((blocks == blocks[:, :1]).all()):
        # num_groups distinct ids and num_groups constant blocks: each block is its own group.
        return size
    return None


def _ids_as_int_tensor(group_ids: Any) -> Tensor:
    if isinstance(group_ids, Tensor):
        if group_ids.is_floating_point() or group_ids.is_complex():
            raise ValueError(
                "group_ids must be integers or hashable ids, got a floating-point tensor: "
                "convert with .long() if the values are whole numbers"
            )
        return group_ids.to(torch.int64) if group_ids.dtype == torch.bool else group_ids
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
    filled = torch.where(present, x, torch.zeros_like(x))
    count = groups.sum(present.to(x.dtype))
    mean = groups.sum(filled) / count.clamp(min=1)
    high = groups.amax(torch.where(present, x, torch.full_like(x, float("-inf"))))
    low = groups.amin(torch.where(present, x, torch.full_like(x, float("inf"))))
    varies = groups.gather(high > low)
    centered = torch.where(present & varies, x - groups.gather(mean), torch.zeros_like(x))
    return GroupMoments(present, count, centered, groups.sum(centered * centered))


def standardize(centered: Tensor, std: Tensor, eps: float) -> Tensor:
    """``centered / (std + eps)`` with 0 wherever ``centered`` is 0 (also when ``std + eps == 0``)."""
    denominator = std + eps
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    return torch.where(centered != 0, centered / safe, torch.zeros_like(centered))


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
