"""The policy update's feedback to an estimator that adapts from it (``ctwa``), on verl's legacy
trainer.

Such an estimator (:attr:`mrgrpo.estimators.registry.Estimator.feedback`) computes a step's
advantages from its incoming state and moves the state only after the policy update, from a
per-rollout signal measured with the *updated* policy
(:data:`mrgrpo.estimators.registry.SIGNALS`, ``clipped_ratio_advantage``). On the legacy trainer
(``trainer.use_v1=false``) that is:

1. ``compute_advantage`` (:func:`mrgrpo.integrations.verl.adapter.rollout_values`): the advantages
   from the incoming state; the batch's rewards, groups and that state are held here
   (:func:`hold`), and the incoming state stays the current one (an update that does not happen,
   e.g. during ``critic_warmup``, moves nothing);
2. ``RayPPOTrainer._update_actor`` runs verl's update, then (the wrap in :mod:`.patch`)
   :func:`after_update`: the updated actor's log-probabilities of the same batch
   (``_compute_old_log_prob``, verl's own call: one more forward pass over the batch per step,
   as the official CTWA code runs), the signal :func:`policy_signal` over the whole batch, and
   :func:`mrgrpo.estimators.registry.apply_feedback`; the new state is the current one, logged,
   checkpointed with verl's checkpoint and restored on resume (:mod:`.state`).

The legacy trainer keeps the whole batch in its driver process, so the statistics are the
batch's, not one data-parallel rank's share (the official code's). verl's v1 trainer is refused
for such an estimator before Ray starts (its rows are agent-loop outputs in a TransferQueue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mrgrpo.estimators import make_groups
from mrgrpo.estimators.binding import Binding
from mrgrpo.estimators.registry import apply_feedback, as_weights, clipped_ratio_advantage
from mrgrpo.integrations.verl.state import METRICS_KEY, STATE


@dataclass
class Pending:
    """What the step's advantages were computed from, kept for the feedback after the update."""

    binding: Binding
    rewards: Tensor  # [N, K] float64, NaN = not scored
    group_ids: Any
    state: dict[str, Any] | None  # the incoming state


#: The step waiting for its feedback (one per trainer process; ``None``: none).
PENDING: Pending | None = None


def hold(binding: Binding, rewards: Tensor, group_ids: Any, state: dict[str, Any] | None) -> None:
    """Keep a feedback estimator's step until the policy update has run."""
    global PENDING
    PENDING = Pending(binding, rewards.detach().to(torch.float64), group_ids, state)


def policy_signal(
    advantages: Tensor, old_log_probs: Tensor, new_log_probs: Tensor, response_mask: Tensor,
    clip_low: float, clip_high: float,
) -> Tensor:
    """``s_i = (1/|o_i|) Σ_t Â_i·ρ_it·1[unclipped]`` ``[N]`` float64, all inputs ``(N, T)``:
    ``Â_i`` the mean of the row's token advantages over its response mask (verl broadcasts one
    value per row), ``ρ = exp(clamp(log π_new − log π_old, −20, 20))``, unclipped where
    ``ρ <= 1 + clip_high`` (``Â >= 0``) or ``ρ >= 1 − clip_low`` (``Â < 0``): the official
    ``compute_ctwa_stats`` with ``w_agg="mean"``
    (:func:`mrgrpo.estimators.registry.clipped_ratio_advantage`). A row without response tokens
    gets 0."""
    mask = response_mask.to(torch.float64)
    per_row = (advantages.to(torch.float64) * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return clipped_ratio_advantage(per_row, old_log_probs, new_log_probs, mask, clip_low, clip_high)


def clip_ratios(actor_config: Any) -> tuple[float, float]:
    """``(clip_low, clip_high)`` as verl's PPO loss reads them (``clip_ratio_low``/``_high``,
    each falling back to ``clip_ratio``)."""
    default = float(actor_config.get("clip_ratio", 0.2))
    low, high = actor_config.get("clip_ratio_low"), actor_config.get("clip_ratio_high")
    return (default if low is None else float(low)), (default if high is None else float(high))


def after_update(trainer: Any, batch: Any) -> None:
    """The feedback of the step held by :func:`hold`, after ``trainer`` (a legacy
    ``RayPPOTrainer``) updated its actor on ``batch`` (the ``DataProto`` of that step)."""
    global PENDING
    pending, PENDING = PENDING, None
    if pending is None:
        return
    new_log_probs, _ = trainer._compute_old_log_prob(batch)  # (the updated actor's, verl's own call)
    low, high = clip_ratios(trainer.config.actor_rollout_ref.actor)
    signal = policy_signal(batch.batch["advantages"], batch.batch["old_log_probs"],
                           new_log_probs.batch["old_log_probs"], batch.batch["response_mask"], low, high)
    binding = pending.binding
    rewards = pending.rewards
    weights = as_weights(binding.estimator_weights, rewards.shape[1], rewards.device)
    groups = make_groups(pending.group_ids, rewards.shape[0], device=rewards.device)
    state = apply_feedback(binding.spec, rewards, groups, weights, binding.call_options(), pending.state,
                           signal.to(rewards.device))
    STATE.put(binding.name, state)
    batch.meta_info[METRICS_KEY] = dict(STATE.metrics)
