"""Validation of estimator option values (shared by the estimator modules)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError


def check_eps(eps: Any, estimator: str) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ConfigError(f"{estimator}: eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def check_ddof(ddof: Any, estimator: str) -> int:
    if isinstance(ddof, bool) or not isinstance(ddof, int) or ddof < 0:
        raise ConfigError(f"{estimator}: ddof must be a non-negative int (1 = unbiased, TRL's default; 0 = population), got {ddof!r}")
    return ddof


def check_bool(value: Any, name: str, estimator: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{estimator}: {name} must be True or False, got {value!r}")
    return value


def check_choice(value: Any, name: str, choices: tuple[str, ...], estimator: str) -> str:
    if value not in choices:
        raise ConfigError(f"{estimator}: {name} must be one of {list(choices)}, got {value!r}")
    return value


def check_reward_ranges(reward_ranges: Any, num_components: int, estimator: str) -> Tensor:
    """``[K, 2]`` float64 ``(lo, hi)`` per component with ``hi > lo``, both finite."""
    if reward_ranges is None:
        raise ConfigError(
            f"{estimator} needs reward_ranges: one (lo, hi) pair per reward component ({num_components}), "
            "e.g. reward_ranges=[(0, 1)] * K, or RewardSuite.reward_ranges"
        )
    try:
        ranges = torch.as_tensor(reward_ranges, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"{estimator}: reward_ranges must be K pairs (lo, hi) of numbers, got {reward_ranges!r}") from None
    if ranges.shape != (num_components, 2):
        raise ConfigError(
            f"{estimator}: reward_ranges must be {num_components} pairs (lo, hi), one per component, "
            f"got shape {tuple(ranges.shape)}"
        )
    if not bool(torch.isfinite(ranges).all()):
        raise ConfigError(f"{estimator}: reward_ranges must be finite, got {ranges.tolist()}")
    bad = (ranges[:, 1] <= ranges[:, 0]).nonzero().flatten().tolist()
    if bad:
        raise ConfigError(
            f"{estimator}: reward_ranges need hi > lo; component(s) {bad} have {[ranges[i].tolist() for i in bad]}"
        )
    return ranges


def check_gamma(gamma: Any, estimator: str) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 <= gamma < float("inf"):
        raise ConfigError(f"{estimator}: gamma must be a finite number >= 0, got {gamma!r}")
    return float(gamma)


def check_given(options: dict[str, Any], estimator: str, **checks: Any) -> None:
    """Run ``checks[key](value, estimator)`` on each option the caller gave (the estimators'
    ``validate`` traits: defaults are not re-checked)."""
    for key, check in checks.items():
        if key in options:
            check(options[key], estimator)


def check_decay(decay: Any, name: str, estimator: str) -> float | None:
    """``None`` or a number in ``[0, 1)`` (an EMA decay)."""
    if decay is None:
        return None
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 <= decay < 1:
        raise ConfigError(f"{estimator}: {name} must be None or a decay in [0, 1), got {decay!r}")
    return float(decay)
