"""Lagrangian constrained GRPO: z-scored reward minus multiplier-weighted z-scored costs (arXiv 2602.05863).

The multipliers are state, updated after each step by projected dual ascent::

    state = None
    for step in training:
        advantages, state = constrained_grpo_step(rewards, group_ids, state, constraints=[3], limits=[0.1])
        # the trainer stores `state` (a JSON-serializable dict) in its checkpoints and logs
        # state["multipliers"], state["cost_means"] and state["violations"] every step

``constrained_grpo`` itself (the registered estimator) is pure: it takes the current
multipliers as its ``multipliers`` option; :func:`update_multipliers` is the pure update.
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
    component_names_option,
    ddof_option,
    eps_option,
    flat_zscores,
    number_option,
    resolve_component,
)
from mrgrpo.estimators.groups import Groups
from mrgrpo.estimators.grpo import grpo
from mrgrpo.estimators.registry import as_reward_matrix, compute_advantages, register_estimator

NAME = "constrained_grpo"


def constraint_columns(constraints: Any, names: list[str] | None, k: int) -> list[int]:
    """The cost components' column indices (``constraints``: one index/name or a list of them)."""
    if constraints is None:
        raise ConfigError(
            f"{NAME} needs constraints: the cost components, by index or name, e.g. constraints=[3] "
            "(and limits=[...], the allowed mean of each cost)"
        )
    specs = [constraints] if isinstance(constraints, (str, int)) else constraints
    if isinstance(specs, bool) or not isinstance(specs, Sequence) or not specs:
        raise ConfigError(f"{NAME}: constraints must be a component index or name, or a non-empty list of them, got {constraints!r}")
    columns = [resolve_component(spec, names, k, "constraints", NAME) for spec in specs]
    if len(set(columns)) != len(columns):
        raise ConfigError(f"{NAME}: constraints name a component twice ({list(specs)}): list each cost once")
    return columns


def _per_constraint(value: Any, count: int, option: str, *, low: float = -math.inf) -> list[float]:
    """A number, or one number per constraint, as a list of ``count`` floats."""
    if value is None:
        raise ConfigError(f"{NAME} needs {option}: one number per constraint ({count})")
    values = [value] * count if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if isinstance(values, Tensor):
        values = values.tolist()
    if isinstance(values, str) or not isinstance(values, Sequence) or len(values) != count:
        raise ConfigError(f"{NAME}: {option} must be a number or {count} numbers (one per constraint), got {value!r}")
    return [number_option(v, option, NAME, low=low) for v in values]


def constrained_advantages(
    rewards: Tensor, groups: Groups, weights: Tensor, costs: list[int], multipliers: list[float], eps: float, ddof: int
) -> Tensor:
    """``A_i = Z_R,i − Σ_c λ_c Z_c,i`` ``[N]``: ``Z_R`` the group z-score (``grpo``) of the weighted
    total of the non-cost components, ``Z_c`` the group z-score of cost column c."""
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


@register_estimator(NAME)
def constrained_grpo(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    constraints: Any = None,
    limits: Any = None,
    lr: float = 0.01,
    init: Any = 0.0,
    multipliers: Any = None,
    eps: float = 1e-4,
    ddof: int = 1,
    component_names: Any = None,
) -> Tensor:
    """Constrained GRPO advantage ``A_i = Z_R,i − Σ_c λ_c Z_c,i`` for the current multipliers.

    Constrained GRPO (Girgis et al., arXiv 2602.05863): some components are costs ``C_c`` whose
    batch mean should stay below ``limit_c``; the Lagrangian ``R − Σ_c λ_c C_c`` is optimized
    with multipliers raised while a constraint is violated. Each term is normalized before
    combining (``Z_R`` the group z-score of ``T_i = Σ_{k∉costs} w_k r_ik``, ``Z_c`` that of cost
    c): normalizing the combined reward instead would let the components' in-group stds rescale
    the multipliers, which the paper shows breaks constraint control.

    Args:
        rewards: ``[N, K]`` float32 or float64, NaN = not scored (as in ``grpo`` for ``Z_R``; per
            component for ``Z_c``).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]``; the reward components' weights enter ``T``; a cost's weight is not
            used and must be 1 (the default) or 0.
        constraints: required: the cost components, an index or name or a list of them.
        limits: required: the allowed batch mean of each cost (a number for all, or one each).
        lr: the multipliers' step size (used by :func:`update_multipliers`, not here).
        init: the initial multipliers (``>= 0``; a number or one each), used when ``multipliers``
            is None.
        multipliers: the current ``λ_c`` (``>= 0``, one per constraint): the state a trainer
            carries between steps (see :func:`constrained_grpo_step`).
        eps, ddof: of every group z-score: ``(x − mean_g x)/(std_g x + eps)``, defaults as
            ``grpo`` (1e-4, unbiased).
        component_names: ``K`` names, so that ``constraints`` may be names.

    Returns:
        ``[N]`` in the computing dtype; a group of one or a constant term contributes 0 to
        that term. ``λ = 0`` gives ``grpo`` on the reward components.
    """
    k = rewards.shape[1]
    names = component_names_option(component_names, k, NAME)
    costs = constraint_columns(constraints, names, k)
    _per_constraint(limits, len(costs), "limits")
    number_option(lr, "lr", NAME, low=0.0)
    lam = _per_constraint(init if multipliers is None else multipliers, len(costs),
                          "init" if multipliers is None else "multipliers", low=0.0)
    eps = eps_option(eps, NAME)
    ddof = ddof_option(ddof, NAME)
    check_unused_weights(weights, costs, NAME, "a cost enters the advantage through its multiplier")
    return constrained_advantages(rewards, groups, weights, costs, lam, eps, ddof)


def cost_means(rewards: Any, constraints: Any, component_names: Any = None) -> list[float]:
    """Batch mean of each cost component over its scored entries (NaN where none is scored)."""
    values, _ = as_reward_matrix(rewards)
    k = values.shape[1]
    costs = constraint_columns(constraints, component_names_option(component_names, k, NAME), k)
    block = values[:, costs].to(torch.float64)
    present = ~torch.isnan(block)
    total = torch.where(present, block, torch.zeros_like(block)).sum(dim=0)
    count = present.sum(dim=0)
    return [float(t / c) if c else math.nan for t, c in zip(total.tolist(), count.tolist())]


def update_multipliers(
    multipliers: Any, rewards: Any, constraints: Any, limits: Any, lr: float = 0.01, component_names: Any = None
) -> list[float]:
    """One projected dual-ascent step ``λ_c ← max(0, λ_c + lr · (mean_batch C_c − limit_c))``.

    Pure. ``multipliers``: the current ``λ`` (one per constraint); ``rewards`` ``[N, K]`` of
    the step just taken (the mean skips NaN entries; a cost with no scored entry keeps its λ).
    """
    means = cost_means(rewards, constraints, component_names)
    count = len(means)
    lam = _per_constraint(multipliers, count, "multipliers", low=0.0)
    bounds = _per_constraint(limits, count, "limits")
    lr = number_option(lr, "lr", NAME, low=0.0)
    return [l if math.isnan(m) else max(0.0, l + lr * (m - b)) for l, m, b in zip(lam, means, bounds)]


def constrained_grpo_step(
    rewards: Any,
    group_ids: Any,
    state: dict[str, Any] | None,
    weights: Any = None,
    *,
    constraints: Any,
    limits: Any,
    lr: float = 0.01,
    init: Any = 0.0,
    component_names: Any = None,
    **options: Any,
) -> tuple[Tensor, dict[str, Any]]:
    """Advantages with the state's multipliers, and the state after this step's update.

    ``state``: ``None`` (start from ``init``) or the dict this function returned:
    ``{"multipliers": [λ_c], "steps": t, "cost_means": [...], "violations": [mean C_c −
    limit_c], "constraints": [...], "limits": [...]}`` (JSON-serializable; ``multipliers`` are
    the ones to use next). ``options``: ``eps``, ``ddof``.
    """
    values, _ = as_reward_matrix(rewards)
    k = values.shape[1]
    names = component_names_option(component_names, k, NAME)
    count = len(constraint_columns(constraints, names, k))
    if state is None:
        lam, steps = _per_constraint(init, count, "init", low=0.0), 0
    else:
        try:
            lam, steps = list(state["multipliers"]), int(state["steps"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{NAME}: state must be a dict from constrained_grpo_step (multipliers, steps), got {state!r}") from None
        if len(lam) != count:
            raise ConfigError(f"{NAME}: state has {len(lam)} multipliers but there are {count} constraints: keep constraints fixed over a run")
    advantages = compute_advantages(
        rewards, group_ids, NAME, weights, constraints=constraints, limits=limits, lr=lr, init=init,
        multipliers=lam, component_names=component_names, **options,
    )
    means = cost_means(values, constraints, names)
    bounds = _per_constraint(limits, count, "limits")
    new = update_multipliers(lam, values, constraints, limits, lr, names)
    state = {
        "multipliers": new,
        "steps": steps + 1,
        "cost_means": means,
        "violations": [m - b for m, b in zip(means, bounds)],
        "constraints": list(constraints) if isinstance(constraints, (list, tuple)) else [constraints],
        "limits": bounds,
    }
    return advantages, state


__all__ = ["constrained_grpo", "constrained_grpo_step", "cost_means", "update_multipliers"]
