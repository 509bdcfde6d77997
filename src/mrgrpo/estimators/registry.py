"""The estimator registry and the one public entry point, :func:`compute_advantages`.

Every estimator has the same signature::

    fn(rewards: Tensor[N, K] float32 | float64, groups: Groups, weights: Tensor[K] float64, *,
       **options) -> Tensor[N] float32 | float64

``rewards`` arrive validated (finite or NaN) in the dtype to compute in (float32 for float32,
float16 and bfloat16 inputs, float64 otherwise), ``groups`` built by :func:`make_groups`, and the
options are keyword-only parameters with defaults: their names are the estimator's options, so
an unknown option name is caught here, before any math runs.

An estimator registered with ``screens_rewards=True`` takes over the value check: it receives
the rewards checked for shape and dtype only, and must call :func:`check_reward_values` (same
errors, same messages) before it relies on them being finite or NaN-free, and give exact zeros
to rollouts whose every component is NaN. GRPO and Dr. GRPO do, because their first pass over
the rewards (the weighted total) already tells: a total that is finite everywhere, with no zero
weight, proves every reward finite, so the separate pass over the ``[N, K]`` matrix is skipped.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from mrgrpo.errors import InputError, UnknownNameError
from mrgrpo.estimators.groups import Groups, make_groups

EstimatorFn = Callable[..., Tensor]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its name, function and options with their defaults."""

    name: str
    fn: EstimatorFn
    options: dict[str, Any]
    summary: str
    screens_rewards: bool = False

    def check_options(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(f"{k}={v!r}" for k, v in self.options.items()) or "none"
            raise ValueError(
                f"estimator {self.name!r} has no option(s) {unknown}; its options (defaults) are: {known}"
            )


_REGISTRY: dict[str, Estimator] = {}


def register_estimator(
    name: str, *, overwrite: bool = False, screens_rewards: bool = False
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator registering ``fn(rewards, groups, weights, *, **options)`` under ``name``.

    Options must be keyword-only parameters with defaults (``inspect.Parameter.empty`` marks a
    required option). Registering a different function under a taken name raises unless
    ``overwrite=True``. ``screens_rewards=True``: the estimator checks the reward values itself
    (see the module docstring); leave it False unless the estimator calls
    :func:`check_reward_values`.
    """

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        params = list(inspect.signature(fn).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != 3:
            raise TypeError(
                f"estimator {name!r} must take (rewards, groups, weights, *, **options), "
                f"got positional parameters {[p.name for p in positional]}"
            )
        options = {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}
        existing = _REGISTRY.get(name)
        if existing is not None and existing.fn is not fn and not overwrite:
            raise ValueError(f"an estimator named {name!r} is already registered; pass overwrite=True to replace it")
        doc = inspect.getdoc(fn) or ""
        _REGISTRY[name] = Estimator(name, fn, options, doc.splitlines()[0] if doc else "", screens_rewards)
        return fn

    return decorator


def available_estimators() -> list[str]:
    """Names of all registered estimators, sorted."""
    return sorted(_REGISTRY)


def get_estimator(name: str) -> Estimator:
    """The registered :class:`Estimator` called ``name``."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownNameError("estimator", name, available_estimators(), "register your own with @mrgrpo.register_estimator") from None


#: dtypes computed in float32 (exactly representable there); every other input in float64.
FLOAT32_COMPUTE = (torch.float32, torch.float16, torch.bfloat16)


def as_reward_matrix(rewards: Any) -> tuple[Tensor, torch.dtype]:
    """Validate ``rewards`` ``[N, K]``: the values to compute with, and the dtype to return in.

    Accepts a torch tensor (any device but ``meta``), a numpy array or nested lists. NaN = not
    scored; ±inf raises. float32, float16 and bfloat16 tensors are computed in float32 (their
    values are exact there); float64 tensors, integer tensors and lists in float64. Lists and
    integer inputs return float32.
    """
    values, out_dtype, _ = screen_rewards(rewards)
    return values, out_dtype


def screen_rewards(rewards: Any) -> tuple[Tensor, torch.dtype, bool]:
    """:func:`as_reward_matrix` plus whether any entry is NaN."""
    values, out_dtype = reward_tensor(rewards)
    return values, out_dtype, check_reward_values(values)


def reward_tensor(rewards: Any) -> tuple[Tensor, torch.dtype]:
    """The shape and dtype half of :func:`as_reward_matrix` (values not looked at): ``[N, K]``
    contiguous in the dtype to compute in, and the dtype to return in."""
    if isinstance(rewards, Tensor):
        if rewards.device.type == "meta":
            raise InputError(
                "rewards are on the meta device (shapes only, no values): pass a tensor with data (cpu or cuda)"
            )
        tensor = rewards.detach()
    elif isinstance(rewards, np.ndarray):
        if rewards.dtype.kind not in "biuf":
            raise InputError(f"rewards must be numeric, got a numpy array of dtype {rewards.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(rewards))
    else:
        try:
            tensor = torch.tensor(rewards, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as error:
            raise InputError(
                f"rewards must be a [N, K] tensor, array or nested list of numbers (None is not "
                f"allowed: use float('nan') for an unscored component): {error}"
            ) from None
    if tensor.is_complex():
        raise InputError("rewards must be real numbers, got a complex tensor")
    is_array = isinstance(rewards, (Tensor, np.ndarray))
    out_dtype = tensor.dtype if is_array and tensor.is_floating_point() else torch.float32
    if tensor.dim() != 2:
        hint = " (for a single component use rewards[:, None])" if tensor.dim() == 1 else ""
        raise InputError(f"rewards must be 2-D [N rollouts, K components], got shape {tuple(tensor.shape)}{hint}")
    if tensor.shape[1] == 0:
        raise InputError("rewards has no components (K = 0): pass at least one reward column")
    compute = torch.float32 if tensor.dtype in FLOAT32_COMPUTE else torch.float64
    return tensor.to(compute).contiguous(), out_dtype


def check_reward_values(values: Tensor) -> bool:
    """Whether any reward is NaN (not scored); ±inf raises an :class:`InputError` naming the
    first one. One fused reduction decides "no NaN and no ±inf" in the common case."""
    # The sum is finite unless some entry is NaN or ±inf (or the sum overflows).
    if not values.numel() or bool(torch.isfinite(values.sum())):
        return False
    infinite = torch.isinf(values)
    if bool(infinite.any()):
        row, col = (int(i) for i in infinite.nonzero()[0])
        raise InputError(
            f"rewards contain {int(infinite.sum())} infinite value(s) (first at row {row}, component {col}): "
            "clip them to a finite range, or use NaN to mark a component as not scored"
        )
    return bool(torch.isnan(values).any())


def zero_unscored(advantages: Tensor, values: Tensor) -> Tensor:
    """``advantages`` with exact zeros on the rollouts whose every component is NaN."""
    return torch.where(scored_rows(values), advantages, torch.zeros_like(advantages))


def as_weights(weights: Any, num_components: int, device: torch.device) -> Tensor:
    """``[K]`` float64 weights (default all 1); wrong length or non-finite values raise."""
    if weights is None:
        return torch.ones(num_components, dtype=torch.float64, device=device)
    if isinstance(weights, Tensor):
        w = weights.detach().to(device="cpu", dtype=torch.float64)
    else:
        w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    if w.dim() != 1 or w.numel() != num_components:
        raise ValueError(
            f"weights must have one entry per reward component ({num_components}), got shape {tuple(w.shape)}"
        )
    # (K numbers: checked in Python, cheaper than a tensor reduction)
    if not all(math.isfinite(v) for v in w.tolist()):
        raise ValueError(f"weights must be finite, got {w.tolist()}")
    return w.to(device)


def compute_advantages(
    rewards: Any,
    group_ids: Any,
    estimator: str = "grpo",
    weights: Any = None,
    **options: Any,
) -> Tensor:
    """One advantage per rollout from a multi-component reward batch.

    Args:
        rewards: ``[N, K]`` torch tensor (any device; the result stays there), numpy array or
            nested lists. NaN = component not scored for that rollout; ±inf is an error.
        group_ids: ``[N]`` group id per rollout (rollouts of one prompt share an id): ints, an
            integer tensor, or any hashables such as strings. Groups may differ in size and
            need not be contiguous. A :class:`Groups` from :func:`make_groups` is used as it
            is (build it once where every batch has the same grouping).
        estimator: a registered name, see :func:`available_estimators`.
        weights: ``[K]`` component weights, default all 1.
        **options: the estimator's options (see its docstring); unknown names raise.

    Returns:
        ``[N]`` advantages, finite, in the input's float dtype (float32 for lists and integer
        input), on the input's device. float64 inputs are computed in float64; float32,
        float16 and bfloat16 inputs in float32 with shifted two-pass moments (within 1e-6 of
        the float64 result, relative to the largest advantage); values too large or too small
        for the squares are rescaled internally by powers of two, so every finite input gives
        exact, finite results. A rollout whose components are all NaN gets exactly 0 and is
        left out of every batch statistic.

    Raises:
        ValueError: bad shapes, ±inf, wrong-length weights, unknown estimator or option, an
            invalid option value, or advantages that do not fit the returned dtype (an
            :class:`~mrgrpo.errors.InputError` naming the overflow); the message names the
            problem and the fix.
    """
    spec = get_estimator(estimator)
    spec.check_options(options)
    values, out_dtype = reward_tensor(rewards)
    # (an estimator that screens its own rewards zeroes the unscored rows itself)
    has_nan = False if spec.screens_rewards else check_reward_values(values)
    groups = make_groups(group_ids, values.shape[0], device=values.device)
    w = as_weights(weights, values.shape[1], values.device)
    if values.dtype == torch.float32 and not _fits_float32(w):
        values = values.to(torch.float64)
    if values.shape[0] == 0:
        return torch.zeros(0, dtype=out_dtype, device=values.device)
    advantages = spec.fn(values, groups, w, **options)
    if has_nan:
        advantages = zero_unscored(advantages, values)
    return check_output(advantages, out_dtype, estimator)


def _fits_float32(weights: Tensor) -> bool:
    """Weights whose nonzero magnitudes keep float32 products exact enough: within 2^±60."""
    nonzero = [abs(v) for v in weights.tolist() if v != 0]
    return not nonzero or (max(nonzero) <= 2.0**60 and min(nonzero) >= 2.0**-60)


def check_output(advantages: Tensor, out_dtype: torch.dtype, estimator: str) -> Tensor:
    """``advantages`` cast to ``out_dtype``, checked finite there (one fused reduction)."""
    if advantages.numel() == 0:
        return advantages.to(out_dtype)
    low, high = (float(v) for v in torch.aminmax(advantages))
    if math.isnan(low) or math.isnan(high):
        raise RuntimeError(f"estimator {estimator!r} produced non-finite advantages; this is a bug in the estimator")
    largest = max(abs(low), abs(high))
    limit = torch.finfo(out_dtype).max
    if largest > limit:
        raise InputError(
            f"{estimator} advantages overflow {str(out_dtype).removeprefix('torch.')} (largest |advantage| "
            f"{largest:.4g} > {limit:.4g}): pass the rewards in a wider dtype (e.g. rewards.double()), or rescale them"
        )
    return advantages.to(out_dtype)


def scored_rows(rewards: Tensor) -> Tensor:
    """``[N]`` bool: the rollout has at least one scored component."""
    return ~torch.isnan(rewards).all(dim=1)


__all__ = [
    "Estimator",
    "Groups",
    "as_reward_matrix",
    "as_weights",
    "available_estimators",
    "check_reward_values",
    "compute_advantages",
    "get_estimator",
    "register_estimator",
    "scored_rows",
]
