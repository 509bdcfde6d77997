"""The estimator registry and the one public entry point, :func:`compute_advantages`.

Every estimator has the same signature::

    fn(rewards: Tensor[N, K] float64, groups: Groups, weights: Tensor[K] float64, *, **options)
        -> Tensor[N] float64

``rewards`` arrive validated (finite or NaN), ``groups`` built by :func:`make_groups`, and the
options are keyword-only parameters with defaults: their names are the estimator's options, so
an unknown option name is caught here, before any math runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from mrgrpo.estimators.groups import Groups, make_groups

EstimatorFn = Callable[..., Tensor]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its name, function and options with their defaults."""

    name: str
    fn: EstimatorFn
    options: dict[str, Any]
    summary: str

    def check_options(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(f"{k}={v!r}" for k, v in self.options.items()) or "none"
            raise ValueError(
                f"estimator {self.name!r} has no option(s) {unknown}; its options (defaults) are: {known}"
            )


_REGISTRY: dict[str, Estimator] = {}


def register_estimator(name: str, *, overwrite: bool = False) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator registering ``fn(rewards, groups, weights, *, **options)`` under ``name``.

    Options must be keyword-only parameters with defaults (``inspect.Parameter.empty`` marks a
    required option). Registering a different function under a taken name raises unless
    ``overwrite=True``.
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
        _REGISTRY[name] = Estimator(name, fn, options, doc.splitlines()[0] if doc else "")
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
        raise ValueError(
            f"unknown estimator {name!r}; available: {', '.join(available_estimators())} "
            "(register your own with @mrgrpo.register_estimator)"
        ) from None


def as_reward_matrix(rewards: Any) -> tuple[Tensor, torch.dtype]:
    """Validate ``rewards`` ``[N, K]`` and return it as float64 plus the dtype to return in.

    Accepts a torch tensor (any device), a numpy array or nested lists. NaN = not scored;
    ±inf raises.
    """
    if isinstance(rewards, Tensor):
        tensor = rewards.detach()
    elif isinstance(rewards, np.ndarray):
        if rewards.dtype.kind not in "biuf":
            raise ValueError(f"rewards must be numeric, got a numpy array of dtype {rewards.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(rewards))
    else:
        try:
            tensor = torch.tensor(rewards, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(
                f"rewards must be a [N, K] tensor, array or nested list of numbers (None is not "
                f"allowed: use float('nan') for an unscored component): {error}"
            ) from None
    if tensor.is_complex():
        raise ValueError("rewards must be real numbers, got a complex tensor")
    out_dtype = tensor.dtype if tensor.is_floating_point() else torch.float32
    if tensor.dim() != 2:
        hint = " (for a single component use rewards[:, None])" if tensor.dim() == 1 else ""
        raise ValueError(f"rewards must be 2-D [N rollouts, K components], got shape {tuple(tensor.shape)}{hint}")
    if tensor.shape[1] == 0:
        raise ValueError("rewards has no components (K = 0): pass at least one reward column")
    values = tensor.to(torch.float64)
    # Cheap screen first: column sums are finite unless some entry is ±inf (or they overflow).
    if not bool(torch.isfinite(torch.nansum(values, dim=0)).all()) and bool(torch.isinf(values).any()):
        infinite = torch.isinf(values)
        row, col = (int(i) for i in infinite.nonzero()[0])
        raise ValueError(
            f"rewards contain {int(infinite.sum())} infinite value(s) (first at row {row}, component {col}): "
            "clip them to a finite range, or use NaN to mark a component as not scored"
        )
    return values, out_dtype


def as_weights(weights: Any, num_components: int, device: torch.device) -> Tensor:
    """``[K]`` float64 weights (default all 1); wrong length or non-finite values raise."""
    if weights is None:
        return torch.ones(num_components, dtype=torch.float64, device=device)
    w = torch.as_tensor(np.asarray(weights.detach().cpu() if isinstance(weights, Tensor) else weights, dtype=np.float64))
    if w.dim() != 1 or w.numel() != num_components:
        raise ValueError(
            f"weights must have one entry per reward component ({num_components}), got shape {tuple(w.shape)}"
        )
    if not bool(torch.isfinite(w).all()):
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
            need not be contiguous.
        estimator: a registered name, see :func:`available_estimators`.
        weights: ``[K]`` component weights, default all 1.
        **options: the estimator's options (see its docstring); unknown names raise.

    Returns:
        ``[N]`` advantages, finite, in the input's float dtype (float32 for lists and integer
        input), on the input's device. Computed in float64. A rollout whose components are all
        NaN gets exactly 0 and is left out of every batch statistic.

    Raises:
        ValueError: bad shapes, ±inf, wrong-length weights, unknown estimator or option, or an
            invalid option value; the message names the problem and the fix.
    """
    spec = get_estimator(estimator)
    spec.check_options(options)
    values, out_dtype = as_reward_matrix(rewards)
    groups = make_groups(group_ids, values.shape[0], device=values.device)
    w = as_weights(weights, values.shape[1], values.device)
    if values.shape[0] == 0:
        return torch.zeros(0, dtype=out_dtype, device=values.device)
    advantages = spec.fn(values, groups, w, **options)
    scored = ~torch.isnan(values).all(dim=1)
    advantages = torch.where(scored, advantages, torch.zeros_like(advantages))
    if not bool(torch.isfinite(advantages).all()):
        raise RuntimeError(f"estimator {estimator!r} produced non-finite advantages; this is a bug in the estimator")
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
    "compute_advantages",
    "get_estimator",
    "register_estimator",
    "scored_rows",
]
