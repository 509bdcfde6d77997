"""Group bookkeeping and NaN-aware within-group statistics, vectorized over all groups.

Every estimator needs the same few reductions "per group, per component": counts, means,
centered values and standard deviations. They are computed here once, for all groups at the
same time, in one of two layouts chosen by :func:`make_groups`:

* **blocks** — the rollouts are contiguous blocks of ``G`` rows per group (TRL's layout, and
  what ``MultiRewardGRPOTrainer`` always passes): an ``[N, C]`` tensor is viewed as
  ``[num_groups, G, C]`` (no copy), per-group statistics are ``[num_groups, 1, C]`` and
  broadcast back for free;
* **index** — any other grouping (shuffled or variable-size groups, verl's uids): the tensor is
  transposed once to ``[C, N]`` and reduced with segment sums (``index_add_``) over the group
  index along its last axis, per-group statistics are ``[C, num_groups]`` (segment sums over a
  contiguous last axis are several times faster than over the rows of an ``[N, C]`` tensor).

Both give the same results. Moments are two-pass and shifted: each group's values are first
taken relative to one of its own members (so a component constant in the group becomes exact
zeros, with no min/max pass), then centered. Values outside a safe window of magnitudes are
rescaled per group and component by a power of two (exact), so no finite input overflows or
underflows the squares.

Shapes: N rollouts, K components (C columns in general), ``num_groups`` groups.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor

from mrgrpo.errors import InputError


@dataclass(frozen=True, eq=False)
class Groups:
    """Which group each of N rollouts belongs to.

    Attributes:
        num_rollouts: N.
        num_groups: number of distinct groups.
        block_size: ``G`` when the rollouts are laid out as contiguous blocks of ``G`` rows per
            group (then :attr:`index` is ``arange(num_groups).repeat_interleave(G)``), else ``None``.
        codes: ``[N]`` int64 in ``[0, num_groups)`` for the index layout (``None`` for blocks).
        device: where the ids live.
    """

    num_rollouts: int
    num_groups: int
    block_size: int | None = None
    codes: Tensor | None = None
    device: torch.device = torch.device("cpu")

    # --- per-rollout index and sizes ------------------------------------------------------

    @cached_property
    def index(self) -> Tensor:
        """``[N]`` int64 group of each rollout (the numbering carries no meaning)."""
        if self.codes is not None:
            return self.codes
        return torch.arange(self.num_groups, device=self.device).repeat_interleave(self.block_size or 1)

    @cached_property
    def sizes(self) -> Tensor:
        """``[num_groups]`` int64 number of rollouts per group."""
        if self.block_size is not None:
            return torch.full((self.num_groups,), self.block_size, dtype=torch.int64, device=self.device)
        return torch.bincount(self.index, minlength=self.num_groups)

    @cached_property
    def first(self) -> Tensor:
        """``[num_groups]`` int64: the first row of each group (a representative member)."""
        if self.block_size is not None:
            return torch.arange(self.num_groups, device=self.device) * self.block_size
        # (int32 where it fits: the segment minimum is the cost here)
        itype = torch.int32 if self.num_rollouts < 2**31 - 1 else torch.int64
        rows = torch.arange(self.num_rollouts, dtype=itype, device=self.device)
        out = torch.full((self.num_groups,), self.num_rollouts, dtype=itype, device=self.device)
        return out.scatter_reduce_(0, self.index, rows, reduce="amin", include_self=True).long()

    def to(self, device: torch.device | str) -> Groups:
        """The same grouping on ``device``."""
        device = torch.device(device)
        codes = None if self.codes is None else self.codes.to(device)
        return Groups(self.num_rollouts, self.num_groups, self.block_size, codes, device)

    # --- flat API: [N, ...] <-> [num_groups, ...] ------------------------------------------

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

    def gather(self, per_group: Tensor) -> Tensor:
        """Broadcast a per-group statistic back to rollouts: ``[num_groups, ...]`` -> ``[N, ...]``."""
        if self.block_size is not None:
            expanded = per_group.unsqueeze(1).expand(self.num_groups, self.block_size, *per_group.shape[1:])
            return expanded.reshape(self.num_rollouts, *per_group.shape[1:])
        return per_group.index_select(0, self.index)

    # --- layout API (the estimators' hot path), see the module docstring -------------------

    def rows(self, x: Tensor) -> Tensor:
        """``[N, C]`` -> the layout: ``[num_groups, G, C]`` (a view) or ``[C, N]`` (a copy)."""
        if self.block_size is not None:
            return x.reshape(self.num_groups, self.block_size, x.shape[1])
        return x.T.contiguous()

    def unrows(self, xl: Tensor) -> Tensor:
        """Inverse of :meth:`rows`: ``[N, C]`` (a view)."""
        if self.block_size is not None:
            return xl.reshape(self.num_rollouts, xl.shape[-1])
        return xl.T

    def col(self, values: Tensor) -> Tensor:
        """A per-column vector ``[C]`` shaped to broadcast against the layout."""
        return values if self.block_size is not None else values.unsqueeze(1)

    def per_row(self, xl: Tensor) -> Tensor:
        """``[N]`` from a layout tensor with a single column or with the columns reduced away."""
        return xl.reshape(self.num_rollouts)

    def combine(self, xl: Tensor, weights: Tensor) -> Tensor:
        """``Σ_c w_c x_c`` per rollout, ``[N]``."""
        if self.block_size is not None:
            return (xl @ weights).reshape(self.num_rollouts)
        return weights @ xl

    def reduce_cols(self, xl: Tensor) -> Tensor:
        """Sum over the columns, keeping the layout's row shape (``[num_groups, G, 1]`` / ``[1, N]``)."""
        return xl.sum(dim=-1, keepdim=True) if self.block_size is not None else xl.sum(dim=0, keepdim=True)

    def total(self, xl: Tensor) -> Tensor:
        """Per-group sums in the layout: ``[num_groups, 1, C]`` or ``[C, num_groups]``."""
        if self.block_size is not None:
            return xl.sum(dim=1, keepdim=True)
        if xl.shape[0] == 1:
            return xl.new_zeros(self.num_groups).index_add_(0, self.index, xl[0]).unsqueeze(0)
        out = xl.new_zeros((xl.shape[0], self.num_groups))
        return out.index_add_(1, self.index, xl)

    def layout_amax(self, xl: Tensor) -> Tensor:
        """Per-group maxima in the layout (``-inf`` for empty groups)."""
        if self.block_size is not None:
            return xl.amax(dim=1, keepdim=True)
        if xl.shape[0] == 1:
            out = xl.new_full((self.num_groups,), float("-inf"))
            return out.scatter_reduce_(0, self.index, xl[0], reduce="amax", include_self=True).unsqueeze(0)
        out = xl.new_full((xl.shape[0], self.num_groups), float("-inf"))
        return out.scatter_reduce_(1, self.index.expand_as(xl), xl, reduce="amax", include_self=True)

    def spread(self, per_group: Tensor) -> Tensor:
        """Per-group statistics broadcast against the layout's rows."""
        if self.block_size is not None:
            return per_group
        if per_group.shape[0] == 1:  # one column: a 1-D gather is several times faster
            return per_group[0].index_select(0, self.index).unsqueeze(0)
        return per_group.index_select(1, self.index)

    def representative(self, xl: Tensor) -> Tensor:
        """Each group's first row, as a per-group statistic."""
        if self.block_size is not None:
            return xl[:, :1]
        return xl.index_select(1, self.first)

    def flat_groups(self, per_group: Tensor) -> Tensor:
        """A per-group layout statistic as ``[num_groups, C]``."""
        return per_group.squeeze(1) if self.block_size is not None else per_group.T

    def layout_groups(self, flat: Tensor) -> Tensor:
        """Inverse of :meth:`flat_groups`: ``[num_groups, C]`` as a per-group layout statistic."""
        return flat.unsqueeze(1) if self.block_size is not None else flat.T

    def layout_sizes(self, dtype: torch.dtype) -> Tensor:
        """Group sizes as a per-group layout statistic with one column."""
        if self.block_size is not None:
            return torch.full((1, 1, 1), float(self.block_size), dtype=dtype, device=self.device)
        return self.sizes.to(dtype).unsqueeze(0)


def make_groups(group_ids: Any, num_rollouts: int, device: torch.device | None = None) -> Groups:
    """Build :class:`Groups` from ``group_ids``.

    ``group_ids`` may be an integer/bool tensor or numpy array, a sequence of ints, or a
    sequence of any hashables (strings such as verl's ``uid``s, tuples, ...). Groups may differ
    in size and need not be contiguous. Contiguous equal-size blocks (TRL's layout) are detected
    in one pass and use the faster block layout. A :class:`Groups` is returned as it is (moved
    to ``device`` if needed): a caller whose grouping repeats, such as a trainer's fixed
    ``num_generations`` blocks, builds it once and keeps its cached index and sizes.

    Raises:
        InputError: wrong length, not one-dimensional, floating-point ids, unhashable ids.
    """
    if isinstance(group_ids, Groups):
        if group_ids.num_rollouts != num_rollouts:
            raise InputError(
                f"the Groups given are for {group_ids.num_rollouts} rollouts but rewards has {num_rollouts} rows: "
                "build them for this batch (make_groups)"
            )
        return group_ids if device is None or group_ids.device == device else group_ids.to(device)
    ids = _ids_as_int_tensor(group_ids)
    if ids.dim() != 1:
        raise InputError(
            f"group_ids must be one-dimensional [N], got shape {tuple(ids.shape)}: pass one id per rollout"
        )
    if ids.numel() != num_rollouts:
        raise InputError(
            f"group_ids has {ids.numel()} entries but rewards has {num_rollouts} rows: pass one group id per rollout"
        )
    if device is not None and ids.device != device:
        ids = ids.to(device)
    if num_rollouts == 0:
        return Groups(0, 0, None, ids, ids.device)
    size = _first_run_length(ids)
    if size > 1:
        block_size = _contiguous_block_size(ids, size)
        if block_size is not None:
            return Groups(num_rollouts, num_rollouts // block_size, block_size, None, ids.device)
    index, num_groups, counts = _dense_codes(ids)
    if size == 1 and num_groups == num_rollouts:  # every rollout its own group: blocks of one
        return Groups(num_rollouts, num_rollouts, 1, None, ids.device)
    groups = Groups(num_rollouts, num_groups, None, index, ids.device)
    if counts is not None:
        groups.__dict__["sizes"] = counts  # the cached_property, filled from the same bincount
    return groups


def _dense_codes(ids: Tensor) -> tuple[Tensor, int, Tensor | None]:
    """Map arbitrary int64 ids to codes ``0..num_groups-1`` (numbering is irrelevant to results),
    plus the group sizes when they came for free (else ``None``)."""
    low, high = (int(v) for v in torch.aminmax(ids))
    span = high - low + 1
    if span <= 4 * ids.numel() + 1024:
        # Compact id range (the usual case): a bincount is O(N + span), far faster than sorting.
        shifted = ids - low if low else ids
        counts = torch.bincount(shifted, minlength=span)
        present = counts > 0
        num_groups = int(present.sum())
        if num_groups == span:  # already dense (0..G-1, shuffled or not): no remapping
            return shifted, num_groups, counts
        codes = torch.cumsum(present, dim=0) - 1
        return codes[shifted], num_groups, counts[present]
    _, inverse = np.unique(ids.cpu().numpy(), return_inverse=True)
    inverse = torch.from_numpy(inverse.reshape(-1).astype(np.int64)).to(ids.device)
    return inverse, int(inverse.max()) + 1, None


def _first_run_length(ids: Tensor) -> int:
    """Length of the run of equal ids at the start (``N`` if all are equal)."""
    n = ids.numel()
    if n > 1:
        first, second = ids[:2].tolist()
        if first != second:  # (shuffled ids: one small read instead of a scan of the head)
            return 1
    head = ids[: min(n, 4096)]
    changes = torch.nonzero(head != head[0])
    if not changes.numel() and n > head.numel():
        changes = torch.nonzero(ids != ids[0])
    return int(changes[0, 0]) if changes.numel() else n


def _contiguous_block_size(ids: Tensor, size: int) -> int | None:
    """``size`` if ``ids`` is contiguous runs of ``size`` rows, each run a different group, else None.

    One comparison of the ``[N/size, size]`` view against its first column checks every run;
    distinct runs are checked on the run ids only (strictly increasing ids, TRL's
    ``arange(N) // G``, need no further work).
    """
    n = ids.numel()
    if n % size:
        return None
    runs = ids.view(n // size, size)
    run_ids = runs[:, 0]
    if not bool((runs == run_ids.unsqueeze(1)).all()):
        return None
    if run_ids.numel() == 1 or bool((run_ids[1:] > run_ids[:-1]).all()):
        return size
    # Runs are distinct groups only if no id comes back in a later run.
    _, count, _ = _dense_codes(run_ids)
    return size if count == run_ids.numel() else None


def _ids_as_int_tensor(group_ids: Any) -> Tensor:
    if isinstance(group_ids, Tensor):
        if group_ids.device.type == "meta":
            raise InputError("group_ids are on the meta device (shapes only, no values): pass ids with data")
        if group_ids.is_floating_point() or group_ids.is_complex():
            raise InputError(
                "group_ids must be integers or hashable ids, got a floating-point tensor: "
                "convert with .long() if the values are whole numbers"
            )
        return group_ids if group_ids.dtype == torch.int64 else group_ids.to(torch.int64)
    if isinstance(group_ids, np.ndarray):
        if group_ids.dtype.kind in "iub":
            return torch.from_numpy(group_ids.astype(np.int64, copy=False))
        if group_ids.dtype.kind in "fc":
            raise InputError(
                "group_ids must be integers or hashable ids, got a floating-point array: "
                "convert with .astype(int) if the values are whole numbers"
            )
        group_ids = group_ids.tolist()
    if isinstance(group_ids, (str, bytes)) or not isinstance(group_ids, Sequence):
        try:
            group_ids = list(group_ids)
        except TypeError:
            raise InputError(
                f"group_ids must be a sequence with one id per rollout, got {type(group_ids).__name__}"
            ) from None
    if all(type(g) is int for g in group_ids):
        return torch.tensor(group_ids, dtype=torch.int64)
    if any(isinstance(g, float) for g in group_ids):
        raise InputError("group_ids must be integers or hashable ids, not floats: use ints or strings")
    codes: dict[Hashable, int] = {}
    try:
        encoded = [codes.setdefault(g, len(codes)) for g in group_ids]
    except TypeError as error:
        raise InputError(f"group_ids must be hashable (ints, strings, tuples): {error}") from None
    return torch.tensor(encoded, dtype=torch.int64)


# --- moments -----------------------------------------------------------------------------

#: Per computing dtype, the range of a group's sum of squared deviations inside which the fast
#: path is exact: its squares neither overflow nor lose precision to underflow. Outside it (or
#: where squares underflowed to 0 although the values differ), moments are recomputed with each
#: group's column rescaled by a power of two, in float64.
SAFE_SUM_SQ = {torch.float32: (2.0**-100, 2.0**100), torch.float64: (2.0**-1000, 2.0**1000)}


def pow2_scale(magnitude: Tensor) -> Tensor:
    """``2^-e`` with ``magnitude = m · 2^e``, ``m ∈ [0.5, 1)`` (1 where magnitude is 0 or not finite).

    Returned as two float64 factors multiplied together, since ``2^-e`` alone may not be
    representable (e.g. ``e = -1074``); multiply by ``scale[0]`` then ``scale[1]``.
    """
    ok = torch.isfinite(magnitude) & (magnitude > 0)
    _, exponent = torch.frexp(torch.where(ok, magnitude, torch.ones_like(magnitude)))
    exponent = torch.where(ok, -exponent.to(torch.int64), torch.zeros_like(exponent, dtype=torch.int64))
    half = torch.div(exponent, 2, rounding_mode="floor")
    one = torch.ones_like(magnitude)
    return torch.stack([torch.ldexp(one, half), torch.ldexp(one, exponent - half)])


@dataclass(frozen=True)
class GroupMoments:
    """Within-group, per-column statistics of ``x`` ``[N, C]`` (NaN = missing), in the layout
    of ``groups`` (see :meth:`Groups.rows`).

    Attributes:
        groups: the grouping.
        centered: layout rows, ``x − group mean``, multiplied by ``scale``; exactly 0 where
            missing and wherever the column is constant within the group.
        count: per-group observed entries (layout statistic).
        sum_sq: per-group sum of squared ``centered`` values (in scaled units).
        scale: per-group power-of-two factor ``centered / (x − mean)``; ``None`` means 1.
        present: layout rows, entry observed; ``None`` when nothing is missing.
    """

    groups: Groups
    centered: Tensor
    count: Tensor
    sum_sq: Tensor
    scale: Tensor | None
    present: Tensor | None

    def std(self, ddof: int) -> Tensor:
        """Per-group standard deviation with ``ddof`` (in scaled units); 0 where ``count <= ddof``."""
        dof = self.count - ddof
        if self.present is None and self.groups.block_size is not None:
            return (self.sum_sq / dof).sqrt() if float(dof.flatten()[0]) > 0 else torch.zeros_like(self.sum_sq)
        return torch.where(dof > 0, self.sum_sq / dof.clamp(min=1), torch.zeros_like(self.sum_sq)).sqrt()

    def scaled_eps(self, eps: float) -> Tensor | float:
        """``eps`` in the scaled units of :attr:`centered`."""
        return eps if self.scale is None else eps * self.scale

    def zscores(self, eps: float, ddof: int, *, in_place: bool = False) -> Tensor:
        """Layout rows ``(x − mean)/(std + eps)``; 0 where centered is 0 (also if ``std + eps = 0``:
        then the column is constant in the group and ``centered`` is exactly 0, so dividing by 1
        instead is exact). ``in_place``: divide :attr:`centered` itself and return it (the same
        values, without a second ``[N, C]`` tensor; :attr:`centered` is no longer the centered
        values afterwards)."""
        denominator = self.std(ddof) + self.scaled_eps(eps)
        safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
        if in_place:
            return self.centered.div_(self.groups.spread(safe))
        return self.centered / self.groups.spread(safe)

    def unit(self) -> tuple[Tensor, Tensor]:
        """Layout rows ``centered / sqrt(Σ_g centered²)`` (0 for a constant column) and the
        per-group bool of varying columns. Scale-free."""
        norm = self.sum_sq.sqrt()
        active = norm > 0
        return self.centered / self.groups.spread(torch.where(active, norm, torch.ones_like(norm))), active

    def unscaled(self) -> Tensor:
        """Layout rows ``x − group mean`` in the input's units (may overflow for huge inputs)."""
        if self.scale is None:
            return self.centered
        return self.centered / self.groups.spread(self.scale)


def has_nan(x: Tensor) -> bool:
    """Whether ``x`` holds a NaN: one reduction decides the common case (a finite sum), the
    elementwise test runs only where the sum is NaN (a NaN, or infinities that cancel)."""
    return bool(torch.isnan(x.sum())) and bool(torch.isnan(x).any())


def group_moments(x: Tensor, groups: Groups, sum_sq: bool = True, shifted: bool = False) -> GroupMoments:
    """NaN-aware within-group moments of ``x`` ``[N, C]`` (shifted two-pass, see the module).

    ``x`` is float32 or float64 and is computed in its own dtype. The result is checked on the
    per-group sums (cheap: ``[num_groups, C]``): a sum of squares outside ``SAFE_SUM_SQ``, or one
    that underflowed to 0 while the shifted values do not sum to 0, sends the batch to the
    rescaled float64 path, so every finite input gives exact moments. ``sum_sq=False`` (for
    estimators that only center, such as Dr. GRPO) skips the squares: then only an overflow of
    the centered values sends the batch to the rescaled path, and :attr:`GroupMoments.sum_sq`
    is ``None``. ``shifted=True`` says ``x`` (without NaN) is already taken relative to a member
    of each group (its first row), so the shift is skipped.
    """
    if shifted:
        xl = groups.rows(x)
        return _centered_moments(x, groups, xl, xl, groups.layout_sizes(x.dtype), None, sum_sq)
    nan_present = has_nan(x)
    xl = groups.rows(x)
    if not nan_present:
        shifted = xl - groups.spread(groups.representative(xl))
        count = groups.layout_sizes(x.dtype)
        present = None
    else:
        present = ~torch.isnan(xl)
        # shift by the group's largest observed value (any observed member would do)
        high = groups.layout_amax(xl.masked_fill(~present, float("-inf")))
        shifted = torch.where(present, xl - groups.spread(high), torch.zeros_like(xl))
        count = groups.total(present.to(x.dtype))
    return _centered_moments(x, groups, xl, shifted, count, present, sum_sq)


def _centered_moments(
    x: Tensor, groups: Groups, xl: Tensor, shifted: Tensor, count: Tensor, present: Tensor | None, sum_sq: bool
) -> GroupMoments:
    shifted_sum = groups.total(shifted)
    mean = shifted_sum / (count if present is None else count.clamp(min=1))
    centered = shifted - groups.spread(mean)
    if present is not None:
        centered = torch.where(present, centered, torch.zeros_like(centered))
    if not sum_sq:
        if not bool(torch.isfinite(shifted_sum.sum())):
            return _scaled_moments(x.to(torch.float64), groups)
        return GroupMoments(groups, centered, count, None, None, present)  # type: ignore[arg-type]
    squares = groups.total(centered * centered)
    low, high_limit = SAFE_SUM_SQ[x.dtype]
    # One reduction decides the common case (every sum inside the window); only a batch with a
    # sum below it looks for one that underflowed although the values differ.
    smallest, largest = (float(v) for v in torch.aminmax(squares))
    if not largest <= high_limit or (
        smallest < low and bool(((squares < low) & ((squares > 0) | (shifted_sum != 0))).any())
    ):
        return _scaled_moments(x.to(torch.float64), groups)
    return GroupMoments(groups, centered, count, squares, None, present)


def group_zscores_1d(x: Tensor, groups: Groups, eps: float, ddof: int) -> Tensor:
    """``(x − mean_g x)/(std_g x + eps)`` ``[N]`` for one float64 column ``x`` ``[N]`` (GRPO's
    hot path), with the same conventions as :meth:`GroupMoments.zscores`.

    One pass fewer than :func:`group_moments`: the sum of squares comes from the shifted sums,
    ``Σd² − (Σd)²/n`` with ``d = x − x_first`` (the shift by a member keeps this accurate to
    ``~n²·ε`` relative, far inside float64's needs, and exactly 0 for a constant group), so the
    centered values are formed only once, in the output. NaN, or magnitudes outside
    ``SAFE_SUM_SQ``, take the general path.
    """
    if x.dtype != torch.float64 or bool(torch.isnan(x.sum())):
        return groups.per_row(group_moments(x.unsqueeze(1), groups).zscores(eps, ddof))
    xl = x.unsqueeze(0) if groups.block_size is None else x.view(groups.num_groups, groups.block_size, 1)
    shifted = xl - groups.spread(groups.representative(xl))
    count = groups.layout_sizes(x.dtype)
    total = groups.total(shifted)
    squares = groups.total(shifted * shifted)
    sum_sq = (squares - total * total / count).clamp(min=0.0)
    low, high = SAFE_SUM_SQ[x.dtype]
    if bool((~(squares <= high) | ((squares < low) & ((squares > 0) | (total != 0)))).any()):
        return groups.per_row(group_moments(x.unsqueeze(1), groups).zscores(eps, ddof))
    dof = count - ddof
    std = torch.where(dof > 0, sum_sq / dof.clamp(min=1), torch.zeros_like(sum_sq)).sqrt()
    denominator = std + eps
    inverse = torch.where(denominator > 0, 1.0 / denominator, torch.zeros_like(denominator))
    mean = total / count
    # exact zeros for constant groups: shifted == 0 and mean == 0 there
    return groups.per_row((shifted - groups.spread(mean)) * groups.spread(inverse))


def _scaled_moments(x: Tensor, groups: Groups) -> GroupMoments:
    """Moments with each group's column first divided by a power of two near its largest |x|."""
    xl = groups.rows(x)
    present = ~torch.isnan(xl)
    magnitude = groups.layout_amax(torch.where(present, xl.abs(), torch.zeros_like(xl)))
    factors = pow2_scale(magnitude)
    scaled = xl * groups.spread(factors[0]) * groups.spread(factors[1])  # exact: powers of two
    high = groups.layout_amax(scaled.masked_fill(~present, float("-inf")))
    shifted = torch.where(present, scaled - groups.spread(high), torch.zeros_like(xl))
    count = groups.total(present.to(x.dtype))
    mean = groups.total(shifted) / count.clamp(min=1)
    centered = torch.where(present, shifted - groups.spread(mean), torch.zeros_like(xl))
    return GroupMoments(
        groups, centered, count, groups.total(centered * centered), factors[0] * factors[1], present
    )


#: Rows per chunk when a float32 matrix is reduced in float64 (the chunk stays in cache).
CHUNK_ROWS = 8192

_WORKSPACE = threading.local()


def workspace(rows: int, cols: int, dtype: torch.dtype) -> Tensor:
    """A CPU scratch buffer ``[rows, cols]`` reused across calls in this thread (contents
    undefined; never returned to callers): chunked float64 work then touches no fresh memory."""
    buffers = _WORKSPACE.__dict__.setdefault("buffers", {})
    key = (rows, cols, dtype)
    buffer = buffers.get(key)
    if buffer is None:
        if len(buffers) > 16:
            buffers.clear()
        buffer = buffers[key] = torch.empty(rows, cols, dtype=dtype)
    return buffer


def column_sums64(x: Tensor) -> Tensor:
    """``Σ_i x_ik`` ``[K]`` accumulated in float64, NaN propagating (a matrix-vector product per
    chunk: a float64 copy of the whole matrix, or a reduction over its strided rows, costs more)."""
    ones = torch.ones(min(x.shape[0], CHUNK_ROWS), dtype=torch.float64, device=x.device)
    if x.dtype == torch.float64 or x.device.type != "cpu":
        return torch.mv(x.to(torch.float64).T, torch.ones(x.shape[0], dtype=torch.float64, device=x.device))
    out = torch.zeros(x.shape[1], dtype=torch.float64)
    buffer = workspace(min(x.shape[0], CHUNK_ROWS), x.shape[1], torch.float64)
    for start in range(0, x.shape[0], CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, x.shape[0])
        chunk = buffer[: stop - start]
        chunk.copy_(x[start:stop])
        out += torch.mv(chunk.T, ones[: stop - start])
    return out


#: Rows folded into one wide row by :func:`column_extremes` and :func:`minus_columns`.
FOLD_ROWS = 64


def column_extremes(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-column minimum and maximum ``[C]`` of ``x`` ``[N, C]`` (NaN propagating, as ``amin``
    and ``amax``), exact. Reducing the rows of a narrow matrix one at a time is slow (``C``
    lanes): the rows are first folded in runs of ``FOLD_ROWS`` into wide rows and reduced over
    those, then over the fold (on the CPU at N = 262,144, K = 7, 0.2 ms against 10 ms)."""
    n, c = x.shape
    whole = n - n % FOLD_ROWS
    if whole == 0 or not x.is_contiguous():
        return x.amin(dim=0), x.amax(dim=0)
    wide = x[:whole].view(whole // FOLD_ROWS, FOLD_ROWS * c)
    low = wide.amin(dim=0).view(FOLD_ROWS, c).amin(dim=0)
    high = wide.amax(dim=0).view(FOLD_ROWS, c).amax(dim=0)
    if whole < n:
        low = torch.minimum(low, x[whole:].amin(dim=0))
        high = torch.maximum(high, x[whole:].amax(dim=0))
    return low, high


def minus_columns(x: Tensor, values: Tensor) -> Tensor:
    """``x − values`` for ``x`` ``[N, C]`` and ``values`` ``[C]`` (the same elementwise
    differences), on rows folded as in :func:`column_extremes`: a broadcast along a short last
    axis is several times slower than one along a wide row."""
    n, c = x.shape
    whole = n - n % FOLD_ROWS
    if whole == 0 or not x.is_contiguous():
        return x - values
    out = torch.empty_like(x)
    torch.sub(x[:whole].view(-1, FOLD_ROWS * c), values.repeat(FOLD_ROWS), out=out[:whole].view(-1, FOLD_ROWS * c))
    if whole < n:
        torch.sub(x[whole:], values, out=out[whole:])
    return out


def standardize(centered: Tensor, denominator: Tensor) -> Tensor:
    """``centered / denominator``; 0 where ``centered`` is 0, also when the denominator is 0.

    The denominator (``std + eps``) can only be 0 where the column is constant in the group
    (``std = 0`` and ``eps = 0``), and there ``centered`` is exactly 0, so dividing by 1 instead
    is exact. A denominator of ``inf`` (``eps`` in scaled units of a tiny group) gives 0.
    """
    return centered / torch.where(denominator > 0, denominator, torch.ones_like(denominator))


def batch_standardize(values: Tensor, scored: Tensor | None, ddof: int, eps: float | Tensor) -> Tensor:
    """Normalize ``values`` ``[N]`` by the mean and std over the ``scored`` rows only
    (``None`` = all rows).

    Unscored rows get 0. Uses ``ddof`` for the std and adds ``eps`` to it (TRL convention).
    If every scored value is equal, every output is exactly 0. The spread is divided by a power
    of two near its largest magnitude before squaring, so no finite input overflows.
    """
    kept = values if scored is None else values[scored]
    n = kept.numel()
    if n == 0:
        return torch.zeros_like(values)
    mean = kept.mean()
    spread = kept - mean
    low, high = torch.aminmax(kept)
    if bool(low == high):
        return torch.zeros_like(values)
    factors = pow2_scale(spread.abs().amax().to(torch.float64)).to(values.dtype)
    factor = factors[0] * factors[1]
    if bool(torch.isfinite(factor)) and 2.0**-60 <= float(factor) <= 2.0**60:
        unit = spread * factor
        var = (unit * unit).sum() / (n - ddof) if n > ddof else unit.new_zeros(())
        out = (values - mean) * factor / (var.sqrt() + eps * factor)
    else:  # extreme magnitudes: do it in float64 with the two-step factor
        unit = spread.double() * factors[0].double() * factors[1].double()
        var = (unit * unit).sum() / (n - ddof) if n > ddof else unit.new_zeros(())
        centered = (values.double() - mean.double()) * factors[0].double() * factors[1].double()
        out = (centered / (var.sqrt() + eps * factors[0].double() * factors[1].double())).to(values.dtype)
    return out if scored is None else torch.where(scored, out, torch.zeros_like(out))


def standardize_kept(values: Tensor, kept: Tensor, ddof: int, eps: float) -> Tensor:
    """:func:`batch_standardize` ``(values, kept, ddof, eps)`` for ``values`` ``[N]`` finite on
    every row (also where not kept), without gathering the kept rows: the rows not kept are
    masked by a factor 0 (a boolean gather or select is several times slower on the CPU than a
    pass of arithmetic). The same conventions (mean and ``ddof`` std over the kept rows, 0
    elsewhere, all zeros when every kept value is equal, the spread rescaled by a power of two
    before squaring); the sums run over all N rows, zeros included, and the mean is corrected
    by the mean of its residuals, so the last bits may differ (no less accurate).
    """
    n = int(kept.sum())
    if n == 0:
        return torch.zeros_like(values)
    mask = kept.to(values.dtype)
    mean = (values * mask).sum() / n
    spread = (values - mean).mul_(mask)  # 0 where not kept
    # (the mean corrected by the mean of the residuals: as accurate as the dtype allows)
    mean = mean + spread.sum() / n
    spread = torch.sub(values, mean, out=spread).mul_(mask)
    largest = spread.abs().amax()
    # Every kept value equal (then 0 everywhere) needs a spread within the rounding of the mean,
    # at most γ_N·|mean| (γ_N = N·ε/(1 − N·ε)); only then are the kept extremes compared.
    unit = torch.finfo(values.dtype).eps / 2
    bound = values.numel() * unit
    if bound >= 0.25 or float(largest) <= 4 * bound * float(mean.abs()):
        big = torch.finfo(values.dtype).max
        high = (values * mask).add_(mask - 1, alpha=big).amax()  # −max off the kept rows
        low = (values * mask).add_(1 - mask, alpha=big).amin()
        if bool(low == high):
            return torch.zeros_like(values)
    factors = pow2_scale(largest.to(torch.float64)).to(values.dtype)
    factor = factors[0] * factors[1]
    if bool(torch.isfinite(factor)) and 2.0**-60 <= float(factor) <= 2.0**60:
        unit_spread = spread.mul_(factor)
        var = (unit_spread * unit_spread).sum() / (n - ddof) if n > ddof else unit_spread.new_zeros(())
        out = unit_spread.div_(var.sqrt() + eps * factor)
    else:  # extreme magnitudes: in float64 with the two-step factor
        scale = factors[0].double() * factors[1].double()
        unit_spread = spread.double() * factors[0].double() * factors[1].double()  # (exact: powers of two)
        var = (unit_spread * unit_spread).sum() / (n - ddof) if n > ddof else unit_spread.new_zeros(())
        out = (unit_spread / (var.sqrt() + eps * scale)).to(values.dtype)
    return out.add_(0.0)  # (−0 to +0 off the kept rows)
