"""A correlation estimate smoothed across training steps, as a pure state-in/state-out function.

``corr_grpo`` with ``pooling="group"`` estimates ρ from each group's G rollouts; with
``pooling="batch"`` from one batch. An exponential moving average over steps pools further: it
is the estimators' ``correlation_ema`` option, whose smoothed matrix is the estimator's state
(see :func:`mrgrpo.estimators.registry.compute_advantages_with_state`)::

    state = None
    for step in training:
        advantages, state = corr_grpo_ema(rewards, group_ids, state, decay=0.9)
        # the trainer stores `state` (a JSON-serializable dict) in its checkpoints

The state is plain data (``{"raw": [[...]], "correlation": [[...]], "steps": t, "decay": d}``),
so adapters carry and checkpoint it without knowing the math.
"""

from __future__ import annotations

from typing import Any

import torch

from mrgrpo.errors import ConfigError
from mrgrpo.estimators.corr_grpo import ema_correlation_step
from mrgrpo.estimators.groups import make_groups
from mrgrpo.estimators.registry import as_reward_matrix, as_weights, compute_advantages_with_state


def update_correlation_state(
    state: dict[str, Any] | None, rewards: Any, group_ids: Any, weights: Any = None, decay: float = 0.9
) -> dict[str, Any]:
    """New state after one batch: ``M_t = decay·M_{t−1} + (1 − decay)·ρ_batch`` (ρ of the
    group-centered, weighted components pooled over the batch), returned bias-corrected as
    ``M_t / (1 − decay^t)`` so early steps are not shrunk toward 0 (as in Adam)."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 <= decay < 1:
        raise ConfigError(f"decay must be in [0, 1), got {decay!r}")
    values, _ = as_reward_matrix(rewards)
    groups = make_groups(group_ids, values.shape[0], device=values.device)
    w = as_weights(weights, values.shape[1], values.device)
    return ema_correlation_step(state, values, groups, w, decay)


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
    correlation, and the new state: ``estimator`` with option ``correlation_ema=decay``.
    Pure: the same inputs give the same outputs."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 <= decay < 1:
        raise ConfigError(f"decay must be in [0, 1), got {decay!r}")
    return compute_advantages_with_state(rewards, group_ids, estimator, weights, state=state, correlation_ema=decay, **options)
