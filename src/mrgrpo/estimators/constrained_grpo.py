"""Lagrangian constrained GRPO: z-scored reward minus multiplier-weighted z-scored costs (arXiv 2602.05863).

The multipliers are the estimator's state (the registry's state protocol), updated after each
step by projected dual ascent; the trainers carry, checkpoint and log it::

    state = None
    for step in training:
        advantages, state = compute_advantages_with_state(
            rewards, group_ids, "constrained_grpo", state=state, constraints=[3], limits=[0.1])
        # state["lambda"]["3"]: the multiplier of component 3 for the next step (logged as
        # mrgrpo/state/lambda/3), state["cost_mean"], state["violation"], state["steps"]

The advantages of a step use the multipliers of the incoming state (``init`` on the first
step); the returned state holds the updated ones. :func:`constrained_advantages` (the
advantages for given multipliers) and :func:`update_multipliers` (the update) are the pure parts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError
from mrgrpo.estimators._multi import (
    check_unused_weights,
    component_index,
    ddof_option,
    eps_option,
    flat_zscores,
    given,
    number_option,
)
from mrgrpo.estimators.groups import Groups
from mrgrpo.estimators.grpo import grpo
from mrgrpo.estimators.registry import register_estimator

NAME = "constrained_grpo"


def constraint_columns(constraints: Any, k: int) -> list[int]:
    """The cost components' column indices (``constraints``: one index or a list of them)."""
    specs = [constraints] if isinstance(constraints, int) and not isinstance(constraints, bool) else constraints
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence) or not specs:
        raise ConfigError(f"{NAME}: constraints must be a component index or a non-empty list of them, got {constraints!r}")
    columns = [component_index(spec, k, "constraints", NAME) for spec in specs]
    if len(set(columns)) != len(columns):
        raise ConfigError(f"{NAME}: constraints name a component twice ({list(specs)}): list each cost once")
    return columns


def _count(constraints: Any) -> int | None:
    if isinstance(constraints, (list, tuple)):
        return len(constraints)
    return 1 if isinstance(constraints, (int, str)) else None


def per_constraint(value: Any, count: int, option: str, *, low: float = -math.inf) -> list[float]:
    """A number, or one number per constraint, as a list of ``count`` floats."""
    values = [value] * count if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if isinstance(values, Tensor):
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != count:
        raise ConfigError(f"{NAME}: {option} must be a number or {count} numbers (one per constraint), got {value!r}")
    return [number_option(v, option, NAME, low=low) for v in values]


def _validate(options: dict, num_components: int | None) -> None:
    count = _count(options.get("constraints"))
    if count is None:
        raise ConfigError(f"{NAME}: constraints must be a component index or name, or a list of them, got {options.get('constraints')!r}")
    value = options["constraints"]
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if num_components is not None and all(isinstance(c, int) for c in items):  # (names: resolved later)
        constraint_columns(value, num_components)
    given(options, {
        "limits": lambda v: per_constraint(v, count, "limits"),
        "lr": lambda v: number_option(v, "lr", NAME, low=0.0),
        "init": lambda v: per_constraint(v, count, "init", low=0.0),
        "eps": lambda v: eps_option(v, NAME),
        "ddof": lambda v: ddof_option(v, NAME),
    })


def constrained_advantages(
    rewards: Tensor, groups: Groups, weights: Tensor, costs: list[int], multipliers: list[float], eps: float, ddof: int
) -> Tensor:
    """``A_i = Z_R,i − Σ_c λ_c Z_c,i`` ``[N]``: ``Z_R`` the group z-score (``grpo``) of the weighted
    total of the non-cost components (0 if every component is a cost), ``Z_c`` the group
    z-score of cost column c, ``λ_c = multipliers[c]``."""
    k = rewards.shape[1]
    reward_cols = [j for j in range(k) if j not in costs]
    if reward_cols:
        advantages = grpo(rewards[:, reward_cols], groups, weights[reward_cols], eps=eps, ddof=ddof)
    else:
        advantages = rewards.new_zeros(rewards.shape[0])
    lam = torch.tensor(multipliers, dtype=rewards.dtype, device=rewards.device)
    if bool((lam != 0).any()):
        z_costs = flat_zscores(rewards[:, costs], groups, eps, ddof)
        advantages = advantages - z_costs @ lam
    return advantages


def cost_means(rewards: Tensor, costs: list[int]) -> list[float]:
    """Batch mean ``[C]`` of each cost column over its scored entries (NaN where none is)."""
    block = rewards[:, costs].to(torch.float64)
    present = ~torch.isnan(block)
    total = torch.where(present, block, torch.zeros_like(block)).sum(dim=0)
    count = present.sum(dim=0)
    return [float(t / c) if c else math.nan for t, c in zip(total.tolist(), count.tolist())]


def update_multipliers(multipliers: list[float], means: list[float], limits: list[float], lr: float) -> list[float]:
    """One projected dual-ascent step ``λ_c ← max(0, λ_c + lr · (mean_batch C_c − limit_c))``;
    a cost with no scored entry this batch (mean NaN) keeps its λ. Pure."""
    return [l if math.isnan(m) else max(0.0, l + lr * (m - b)) for l, m, b in zip(multipliers, means, limits)]


def _incoming(state: Any, costs: list[int], init: list[float]) -> tuple[list[float], int]:
    """The multipliers and step count of the incoming state (``init`` and 0 for ``None``)."""
    if state is None:
        return init, 0
    lam = state.get("multipliers") if isinstance(state, dict) else None
    if not isinstance(lam, list) or len(lam) != len(costs):
        have = len(lam) if isinstance(lam, list) else "no"
        raise ConfigError(
            f"{NAME}: the state has {have} multipliers but constraints={costs} has {len(costs)}: "
            "keep the constraints of the run that saved it, or start without its state"
        )
    return [number_option(v, "state multipliers", NAME, low=0.0) for v in lam], int(state.get("steps", 0))


@register_estimator(
    NAME, combine="other", roles=("constraints",), validate=_validate,
    example_options={"constraints": [1], "limits": [0.5]},
)
def constrained_grpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    constraints: Any,
    limits: Any,
    lr: float = 0.01,
    init: Any = 0.0,
    eps: float = 1e-4,
    ddof: int = 1,
    state: dict[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Any]]:
    """Constrained GRPO advantage ``A_i = Z_R,i − Σ_c λ_c Z_c,i``, and the updated multipliers.

    Constrained GRPO (Girgis et al., arXiv 2602.05863): some components are costs ``C_c`` whose
    batch mean should stay below ``limit_c``; the Lagrangian ``R − Σ_c λ_c C_c`` is optimized
    with multipliers raised while a constraint is violated. Each term is normalized before
    combining (``Z_R`` the group z-score of ``T_i = Σ_{k∉costs} w_k r_ik``, ``Z_c`` that of cost
    c): normalizing the combined reward instead would let the components' in-group stds rescale
    the multipliers, which the paper shows breaks constraint control. After the step:
    ``λ_c ← max(0, λ_c + lr · (mean_batch C_c − limit_c))``.

    Args:
        rewards: ``[N, K]`` float32 or float64, NaN = not scored (as in ``grpo`` for ``Z_R``;
            per component for ``Z_c`` and for the batch mean of a cost).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]``; the reward components' weights enter ``T``; a cost's weight is not
            used and must be 1 (the default) or 0.
        constraints: required: the cost components, an index or a list of them (names where
            the component names are known, resolved by the registry).
        limits: required: the allowed batch mean of each cost (a number for all, or one each).
        lr: the multipliers' step size ``>= 0``, default 0.01.
        init: the first step's multipliers (``>= 0``; a number or one each), default 0.
        eps, ddof: of every group z-score ``(x − mean_g x)/(std_g x + eps)``; defaults as
            ``grpo`` (1e-4, unbiased).
        state: ``None`` (first step: ``λ = init``) or the dict a previous step returned.

    Returns:
        ``(advantages [N], new_state)``: the advantages in the computing dtype, computed with
        the incoming multipliers (a group of one, or a constant term, contributes 0 to that
        term; ``λ = 0`` gives ``grpo`` on the reward components), and the JSON state
        ``{"multipliers": [λ_c], "lambda": {"<index>": λ_c}, "cost_mean": {"<index>": mean},
        "violation": {"<index>": mean − limit}, "steps": t}`` with the updated multipliers
        (``cost_mean``/``violation`` are ``None`` for a cost with no scored entry).
    """
    k = rewards.shape[1]
    costs = constraint_columns(constraints, k)
    bounds = per_constraint(limits, len(costs), "limits")
    lr = number_option(lr, "lr", NAME, low=0.0)
    start = per_constraint(init, len(costs), "init", low=0.0)
    eps = eps_option(eps, NAME)
    ddof = ddof_option(ddof, NAME)
    check_unused_weights(weights, costs, NAME, "a cost enters the advantage through its multiplier")
    lam, steps = _incoming(state, costs, start)
    advantages = constrained_advantages(rewards, groups, weights, costs, lam, eps, ddof)
    means = cost_means(rewards, costs)
    new = update_multipliers(lam, means, bounds, lr)
    keys = [str(c) for c in costs]
    new_state = {
        "multipliers": new,
        "lambda": dict(zip(keys, new)),
        "cost_mean": {key: None if math.isnan(m) else m for key, m in zip(keys, means)},
        "violation": {key: None if math.isnan(m) else m - b for key, m, b in zip(keys, means, bounds)},
        "steps": steps + 1,
    }
    return advantages, new_state


__all__ = ["constrained_advantages", "constrained_grpo", "cost_means", "update_multipliers"]
