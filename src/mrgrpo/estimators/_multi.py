"""Shared pieces of the estimators that fold components in other ways than ``gdpo``: option
checks that raise :class:`~mrgrpo.errors.ConfigError`, component roles (an index or a name),
per-rollout z-scores ``[N, K]`` and checks on weights an estimator does not use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError
from mrgrpo.estimators._checks import check_ddof, check_eps
from mrgrpo.estimators.groups import Groups, group_moments


def eps_option(eps: Any, estimator: str) -> float:
    """``eps >= 0`` finite (a :class:`ConfigError` otherwise)."""
    try:
        return check_eps(eps, estimator)
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from None


def ddof_option(ddof: Any, estimator: str) -> int:
    """``ddof`` a non-negative int (a :class:`ConfigError` otherwise)."""
    try:
        return check_ddof(ddof, estimator)
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from None


def number_option(
    value: Any, name: str, estimator: str, *, low: float = -math.inf, high: float = math.inf, allow_inf: bool = False
) -> float:
    """A real number in ``[low, high]`` (finite unless ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{estimator}: {name} must be a number, got {value!r}")
    if not allow_inf and not math.isfinite(value):
        raise ConfigError(f"{estimator}: {name} must be finite, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{estimator}: {name} must be in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def choice_option(value: Any, name: str, choices: tuple[str, ...], estimator: str) -> str:
    if value not in choices:
        raise ConfigError(f"{estimator}: {name} must be one of {list(choices)}, got {value!r}")
    return value


def component_index(spec: Any, k: int, option: str, estimator: str) -> int:
    """A role's column index. The registry has already turned a component name into its index
    (:func:`~mrgrpo.estimators.registry.validate_options`); this guards direct calls."""
    if isinstance(spec, bool) or not isinstance(spec, int) or not 0 <= spec < k:
        raise ConfigError(f"{estimator}: {option} must be a component index 0..{k - 1}, got {spec!r}")
    return spec


def given(options: dict[str, Any], checks: dict[str, Any]) -> None:
    """Run ``checks[name](value)`` for each option the caller gave (a registry ``validate``)."""
    for name, check in checks.items():
        if name in options:
            check(options[name])


def check_unused_weights(weights: Tensor, unused: Sequence[int], estimator: str, hint: str) -> None:
    """The estimator ignores the weights of the ``unused`` columns: each must be 1 (the
    default) or 0, so that a weight is never silently dropped (the rule
    :func:`~mrgrpo.estimators.binding.bind` applies before a run starts)."""
    from mrgrpo.estimators.binding import unused_weight_problem

    problem = unused_weight_problem(weights.tolist(), unused, estimator, hint)
    if problem:
        raise ConfigError(problem)


def flat_zscores(rewards: Tensor, groups: Groups, eps: float, ddof: int) -> Tensor:
    """``z_ik = (r_ik − mean_g r_k)/(std_g r_k + eps)`` as ``[N, K]`` (0 for NaN entries and for
    components constant in their group)."""
    return groups.unrows(group_moments(rewards, groups).zscores(eps, ddof))


def batch_mean_std(values: Tensor, ddof: int) -> tuple[Tensor, Tensor]:
    """Per-column mean and std ``[K]`` over the non-NaN entries of ``values`` ``[N, K]``, two-pass
    (std 0 for a column with ``<= ddof`` entries; mean NaN for a column with none)."""
    present = ~torch.isnan(values)
    filled = torch.where(present, values, torch.zeros_like(values))
    count = present.sum(dim=0).to(values.dtype)
    mean = filled.sum(dim=0) / count
    centered = torch.where(present, values - mean, torch.zeros_like(values))
    dof = count - ddof
    var = (centered * centered).sum(dim=0) / dof.clamp(min=1)
    std = torch.where(dof > 0, var.sqrt(), torch.zeros_like(var))
    return mean, std
