"""A correlation estimate smoothed across training steps, as a pure state-in/state-out function.

``corr_grpo`` with ``pooling="group"`` estimates ρ from each group's G rollouts; with
``pooling="batch"`` from one batch. An exponential moving average over steps pools further::

    state = None
    for step in training:
        advantages, state = corr_grpo_ema(rewards, group_ids, state, decay=0.9)
        # the trainer stores `state` (a JSON-serializable dict) in its checkpoints

The state is plain data (``{"correlation": [[...]], "steps": t, "decay": d}``), so adapters
carry and checkpoint it without knowing the math.
"""

from __future__ import annotations

from typing import Any

import torch

from mrgrpo.estimators.corr_grpo import batch_units, pooled_correlation
from mrgrpo.estimators.groups import group_moments, make_groups
from mrgrpo.estimators.registry import as_reward_matrix, as_weights, compute_advantages


def update_correlation_state(
    state: dict[str, Any] | None, rewards: Any, group_ids: Any, weights: Any = None, decay: float = 0.9
) -> dict[str, Any]:
    """New state after one batch: ``M_t = decay·M_{t−1} + (1 − decay)·ρ_batch`` (ρ of the
    group-centered, weighted components pooled over the batch), returned bias-corrected as
    ``M_t / (1 − decay^t)`` so early steps are not shrunk toward 0 (as in Adam)."""
    if not 0 <= decay < 1:
        raise ValueError(f"decay must be in [0, 1), got {decay!r}")
    values, _ = as_reward_matrix(rewards)
    groups = make_groups(group_ids, values.shape[0], device=values.device)
    w = as_weights(weights, values.shape[1], values.device)
    units = groups.unrows(batch_units(group_moments(values, groups)))
    rho = pooled_correlation(units * torch.sign(w).to(units.dtype)).double().cpu()
    k = values.shape[1]
    if state is None:
        steps, raw = 0, torch.zeros(k, k, dtype=torch.float64)
    else:
        if state.get("decay", decay) != decay:
            raise ValueError(f"state was built with decay={state['decay']}, not {decay}: keep decay fixed over a run")
        steps, raw = int(state["steps"]), torch.tensor(state["raw"], dtype=torch.float64)
        if raw.shape != (k, k):
            raise ValueError(f"state is for {raw.shape[0]} components, the rewards have {k}")
    raw = decay * raw + (1 - decay) * rho
    steps += 1
    corrected = raw / (1 - decay**steps)
    return {"raw": raw.tolist(), "correlation": corrected.tolist(), "steps": steps, "decay": decay}


def corr_grpo_ema(
    rewards: Any,
    group_ids: Any,
    state: dict[str, Any] | None,
    weights: Any = None,
    decay: float = 0.9,
    estimator: str = "corr_grpo",
    **options: Any,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Advantages of ``estimator`` (``corr_grpo`` or ``sa_corr_grpo``) with the smoothed batch
    correlation, and the new state. Pure: the same inputs give the same outputs."""
    new_state = update_correlation_state(state, rewards, group_ids, weights, decay)
    # sign(w) is already folded into the state's correlation; pass it as the fixed matrix.
    advantages = compute_advantages(
        rewards, group_ids, estimator, weights, pooling="batch", correlation=new_state["correlation"], **options
    )
    return advantages, new_state
