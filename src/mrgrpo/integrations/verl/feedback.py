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

On verl's v1 trainer (``trainer.use_v1=true``; :mod:`.v1`) the steps are the same: the estimator
sees one row per session (its final output), :func:`attach_sessions` keeps how the batch's
TransferQueue rows map onto them, and after ``_update_actor`` the updated actor's log-probabilities
come from verl's ``actor_rollout_wg.compute_log_prob`` (as verl's own reference-in-actor pass
calls it); a session's signal is the mean over all its outputs' response tokens
(:func:`session_signal`).

Both trainers keep the whole batch in their driver process, so the statistics are the batch's,
not one data-parallel rank's share (the official code's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mrgrpo.estimators import make_groups
from mrgrpo.estimators.binding import Binding
from mrgrpo.estimators.registry import aggregate_signal, apply_feedback, as_weights, clipped_ratio_parts, signal_options
from mrgrpo.integrations.verl.state import METRICS_KEY, STATE


@dataclass
class Pending:
    """What the step's advantages were computed from, kept for the feedback after the update."""

    binding: Binding
    rewards: Tensor  # [N, K] float64, NaN = not scored
    group_ids: Any
    state: dict[str, Any] | None  # the incoming state
    #: v1 trainer: the batch's TransferQueue keys and, per key, the index of its session in
    #: ``rewards`` (whose rows are the sessions' final outputs); ``None`` on the legacy trainer
    sessions: tuple[tuple[str, ...], Any] | None = None


#: The step waiting for its feedback (one per trainer process; ``None``: none).
PENDING: Pending | None = None


def hold(binding: Binding, rewards: Tensor, group_ids: Any, state: dict[str, Any] | None) -> None:
    """Keep a feedback estimator's step until the policy update has run."""
    global PENDING
    PENDING = Pending(binding, rewards.detach().to(torch.float64), group_ids, state)


def attach_sessions(keys: tuple[str, ...], rows: Any) -> None:
    """On verl's v1 trainer: the held step's rewards are one row per session (its final output);
    ``keys`` are the batch's TransferQueue keys and ``rows[i]`` the session of key ``i``."""
    if PENDING is not None:
        PENDING.sessions = (tuple(keys), torch.as_tensor(rows, dtype=torch.long))


def take() -> Pending | None:
    """The held step (and forget it): the feedback runs once per update."""
    global PENDING
    pending, PENDING = PENDING, None
    return pending


def session_signal(parts: tuple[Tensor, Tensor, Tensor], rows: Tensor, sessions: int, w_agg: str = "mean") -> Tensor:
    """``[sessions]`` float64: the signal of each multi-turn session, from its outputs' rows.

    ``parts``: :func:`mrgrpo.estimators.registry.clipped_ratio_parts` of the rows (``Σ_t W_t``,
    response tokens, unclipped tokens, each ``[R]``), ``rows`` ``[R]`` the session of each row. A
    session is one rollout whose tokens are all its outputs' response tokens: the parts add up
    over its rows, then ``w_agg`` aggregates them (``"mean"``: ``Σ W / Σ tokens``, 0 for a
    session without a response token)."""
    summed = [torch.zeros(sessions, dtype=torch.float64).index_add_(0, rows, part.double()) for part in parts]
    return aggregate_signal(*summed, w_agg)


def signal_settings(pending: Pending) -> dict[str, Any]:
    """The held estimator's signal options (``w_agg``)."""
    return signal_options(pending.binding.spec, pending.binding.call_options())


def feedback_state(pending: Pending, signal: Tensor) -> dict[str, Any] | None:
    """The state after the update: :func:`mrgrpo.estimators.registry.apply_feedback` on the held
    step with ``signal`` ``[N]`` (one per row of the held rewards); made current and logged."""
    binding, rewards = pending.binding, pending.rewards
    weights = as_weights(binding.estimator_weights, rewards.shape[1], rewards.device)
    groups = make_groups(pending.group_ids, rewards.shape[0], device=rewards.device)
    state = apply_feedback(binding.spec, rewards, groups, weights, binding.call_options(), pending.state,
                           signal.to(rewards.device))
    STATE.put(binding.name, state)
    return state


def policy_signal(
    advantages: Tensor, old_log_probs: Tensor, new_log_probs: Tensor, response_mask: Tensor,
    clip_low: float, clip_high: float, w_agg: str = "mean",
) -> Tensor:
    """The ``clipped_ratio_advantage`` signal ``[N]`` float64, all inputs ``(N, T)``: ``Â_i`` the
    mean of the row's token advantages over its response mask (verl broadcasts one value per
    row), ``ρ = exp(clamp(log π_new − log π_old, −20, 20))``, unclipped where ``ρ <= 1 +
    clip_high`` (``Â >= 0``) or ``ρ >= 1 − clip_low`` (``Â < 0``), aggregated as ``w_agg`` says:
    the official ``compute_ctwa_stats`` (:func:`mrgrpo.estimators.registry.clipped_ratio_advantage`)."""
    return aggregate_signal(*policy_parts(advantages, old_log_probs, new_log_probs, response_mask, clip_low, clip_high), w_agg)


def policy_parts(
    advantages: Tensor, old_log_probs: Tensor, new_log_probs: Tensor, response_mask: Tensor, clip_low: float, clip_high: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`mrgrpo.estimators.registry.clipped_ratio_parts` of verl's rows (inputs as
    :func:`policy_signal`)."""
    mask = response_mask.to(torch.float64)
    per_row = (advantages.to(torch.float64) * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return clipped_ratio_parts(per_row, old_log_probs, new_log_probs, mask, clip_low, clip_high)


def clip_ratios(actor_config: Any) -> tuple[float, float]:
    """``(clip_low, clip_high)`` as verl's PPO loss reads them (``clip_ratio_low``/``_high``,
    each falling back to ``clip_ratio``)."""
    default = float(actor_config.get("clip_ratio", 0.2))
    low, high = actor_config.get("clip_ratio_low"), actor_config.get("clip_ratio_high")
    return (default if low is None else float(low)), (default if high is None else float(high))


def after_update(trainer: Any, batch: Any) -> None:
    """The feedback of the step held by :func:`hold`, after ``trainer`` (a legacy
    ``RayPPOTrainer``) updated its actor on ``batch`` (the ``DataProto`` of that step)."""
    pending = take()
    if pending is None:
        return
    new_log_probs, _ = trainer._compute_old_log_prob(batch)  # (the updated actor's, verl's own call)
    low, high = clip_ratios(trainer.config.actor_rollout_ref.actor)
    signal = policy_signal(batch.batch["advantages"], batch.batch["old_log_probs"],
                           new_log_probs.batch["old_log_probs"], batch.batch["response_mask"], low, high,
                           **signal_settings(pending))
    feedback_state(pending, signal)
    batch.meta_info[METRICS_KEY] = dict(STATE.metrics)
