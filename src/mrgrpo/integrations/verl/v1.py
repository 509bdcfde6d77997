"""mrgrpo estimators on verl's v1 trainer (``trainer.use_v1=true``, verl 0.9's default).

verl 0.9.1's ``PPOTrainer._compute_advantage`` (``verl/trainer/ppo/v1/trainer_base.py``) reads
only ``uid``, ``response_mask``, ``rm_scores`` and log-probs from the TransferQueue, so no
advantage estimator sees the reward components, which travel per row in
``extra_fields["reward_extra_info"]`` (agent-loop reward) or as fields of their own (colocated
reward model). And its ``compute_advantage_for_multi_trajectories`` groups multi-turn sessions
by their final output only for ``grpo``.

The one adaptation: every trainer in verl's v1 registry (``trainer.v1.trainer_mode``: ``sync``,
``colocate_async``, ``separate_async``) is replaced by a subclass whose ``_compute_advantage``,
for ``mrgrpo_*`` estimators only, reads the configured components of the batch's rows from the
queue and runs verl's own ``_compute_advantage`` (KL-in-reward, rollout correction, write-back:
all verl's) with them in scope (:func:`.sessions.using`). The registered estimator then computes
on each session's final output, grouped by ``uid``, and broadcasts the result to the session's
other rows (:class:`.sessions.Trajectories`). Every other estimator runs verl's code unchanged.
The subclass also runs the feedback of an estimator that moves its state from the policy update
(``ctwa``) after ``_update_actor`` (:func:`feedback_after_update`), saves a stateful estimator's
state beside verl's checkpoint and restores it when verl resumes (:mod:`.state`), adds the state's numeric entries to the step's metrics, and
imports the modules of ``algorithm.mrgrpo.import`` before the estimator is looked up.
No verl file is edited; trainers registered after :func:`install` are wrapped by calling it again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import trainer_base
from verl.workers.utils.padding import response_from_nested

from mrgrpo.errors import InputError
from mrgrpo.integrations.verl.binding import resolved_components
from mrgrpo.integrations.verl.names import mrgrpo_name, verl_name
from mrgrpo.integrations.verl.registration import import_user_modules
from mrgrpo.integrations.verl import feedback
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig
from mrgrpo.integrations.verl.sessions import Trajectories, scores_column, using
from mrgrpo.integrations.verl.state import STATE, load_after, save_after

EXTRA_FIELDS = "extra_fields"
REWARD_EXTRA_INFO = "reward_extra_info"


def read_trajectories(batch: Any, components: tuple[str, ...] | None) -> Trajectories:
    """The keys, padding flags and reward components of a ``KVBatchMeta``'s rows, from the queue.

    A component is read from a field of its own name if the rows have one (verl writes a
    colocated reward model's ``reward_extra_info`` that way), else from each row's
    ``extra_fields["reward_extra_info"]`` (the agent loop's reward). A component missing from a
    row that is not padding raises, naming the keys the row has.
    """
    keys = tuple(batch.keys)
    padding = np.array([bool((tag or {}).get("is_padding", False)) for tag in batch.tags], dtype=bool)
    if not components or not keys:
        return Trajectories(keys=keys, padding=padding)
    data = tq.kv_batch_get(keys=list(keys), partition_id=batch.partition_id, select_fields=[*components, EXTRA_FIELDS])
    present = set(data.keys())
    infos: list[dict[str, Any]] | None = None
    columns: dict[str, np.ndarray] = {}
    for name in components:
        if name in present:
            values = list(data[name])
        else:
            if infos is None:
                extras = list(data[EXTRA_FIELDS]) if EXTRA_FIELDS in present else [None] * len(keys)
                infos = [dict((e or {}).get(REWARD_EXTRA_INFO) or {}) if isinstance(e, dict) else {} for e in extras]
            values = []
            for row, info in enumerate(infos):
                if name not in info and not padding[row]:
                    raise InputError(
                        f"reward component {name!r} (algorithm.mrgrpo.components) is not in row {keys[row]!r}: "
                        f"its reward_extra_info has {sorted(info)}. The reward function must return a dict with "
                        f"a {name!r} entry"
                    )
                values.append(info.get(name))
        columns[name] = scores_column(values, name)
    return Trajectories(keys=keys, columns=columns, padding=padding)


class MrgrpoAdvantageMixin:
    """Gives ``mrgrpo_*`` estimators a v1 batch's reward components and sessions (see module doc)."""

    config: Any

    def _compute_advantage(self, batch, metrics):  # noqa: D401 - verl's signature
        estimator = mrgrpo_name(self.config.algorithm.adv_estimator)
        if estimator is None:
            return super()._compute_advantage(batch, metrics)
        settings = MrgrpoVerlConfig.from_algorithm_config(self.config.algorithm)
        if settings.imports or verl_name(estimator) not in core_algos.ADV_ESTIMATOR_REGISTRY:
            import_user_modules(settings)  # a user's own estimator: registered before verl looks it up
        components, _ = resolved_components(settings)
        trajectories = read_trajectories(batch, components)
        with using(trajectories):
            result = super()._compute_advantage(batch, metrics)
        if STATE.estimator == estimator:
            metrics.update(STATE.metrics)  # a stateful estimator's numeric state, every step
        return result

    def _update_actor(self, batch, metrics):  # noqa: D401 - verl's signature
        result = super()._update_actor(batch, metrics)
        pending = feedback.take()
        if pending is not None:  # an estimator that moves its state from the update (ctwa)
            feedback_after_update(self, batch, pending)
            metrics.update(STATE.metrics)
        return result

    def _save_checkpoint(self, *args, **kwargs):
        result = super()._save_checkpoint(*args, **kwargs)
        if mrgrpo_name(self.config.algorithm.adv_estimator) is not None:
            save_after(self)  # beside verl's checkpoint (global_step_<n>/)
        return result

    def _load_checkpoint(self, *args, **kwargs):
        result = super()._load_checkpoint(*args, **kwargs)
        if mrgrpo_name(self.config.algorithm.adv_estimator) is not None:
            load_after(self)  # from the folder verl resumed from
        return result


def updated_log_probs(trainer: Any, batch: Any) -> torch.Tensor:
    """``(N, T)`` the updated actor's log-probabilities of the batch's response tokens (padded
    with 0), from verl's ``actor_rollout_wg.compute_log_prob`` as verl's reference-in-actor pass
    calls it (no entropy, no loss), but with the actor's adapter on. The call writes the
    ``log_probs`` field of the rows, as verl's own passes do; ``extra_info`` is put back."""
    keys = ("calculate_entropy", "compute_loss", "temperature", "no_lora_adapter")
    saved = {k: batch.extra_info[k] for k in keys if k in batch.extra_info}
    batch.extra_info.update({
        "calculate_entropy": False, "compute_loss": False, "no_lora_adapter": False,
        "temperature": trainer.config.actor_rollout_ref.rollout.temperature,
    })
    try:
        output = trainer.actor_rollout_wg.compute_log_prob(batch)
        if output is not None and len(output) != len(batch):
            raise InputError(f"verl's compute_log_prob returned {len(output)} rows for {len(batch)}")
    finally:
        for k in keys:
            batch.extra_info.pop(k, None)
        batch.extra_info.update(saved)
    data = tq.kv_batch_get(keys=list(batch.keys), partition_id=batch.partition_id, select_fields=["log_probs", "response_mask"])
    return response_from_nested(data["log_probs"], data["response_mask"]).to_padded_tensor(0.0)


def feedback_after_update(trainer: Any, batch: Any, pending: feedback.Pending) -> None:
    """The held step's feedback after ``trainer`` updated its actor on ``batch`` (a
    ``KVBatchMeta``): the signal of each row from the queue's ``advantages``, ``old_log_probs`` and
    ``response_mask`` and the updated actor's log-probabilities, then per session
    (:func:`.feedback.session_signal`), then the estimator's state update."""
    if pending.sessions is None:
        raise InputError("the feedback step was held without its sessions: compute_advantage did not run on this v1 batch")
    held_keys, rows = pending.sessions
    keys = tuple(batch.keys)
    if set(keys) != set(held_keys) or len(keys) != len(held_keys):
        raise InputError("the updated batch's TransferQueue keys are not those its advantages were computed for")
    new = updated_log_probs(trainer, batch)
    data = tq.kv_batch_get(keys=list(keys), partition_id=batch.partition_id,
                           select_fields=["advantages", "old_log_probs", "response_mask"])
    mask = data["response_mask"].to_padded_tensor(0)
    advantages = data["advantages"].to_padded_tensor(0.0)
    old = data["old_log_probs"].to_padded_tensor(0.0)
    width = mask.shape[1]
    low, high = feedback.clip_ratios(trainer.config.actor_rollout_ref.actor)
    parts = feedback.policy_parts(advantages[:, :width], old[:, :width], new[:, :width], mask, low, high)
    position = {key: i for i, key in enumerate(held_keys)}
    session_of = rows[torch.tensor([position[key] for key in keys], dtype=torch.long)]
    signal = feedback.session_signal(parts, session_of, pending.rewards.shape[0], **feedback.signal_settings(pending))
    feedback.feedback_state(pending, signal)


_BASE_ATTR = "_mrgrpo_base"


def install() -> dict[str, type]:
    """Replace every registered v1 trainer by its :class:`MrgrpoAdvantageMixin` subclass
    (idempotent); returns the registry."""
    registry = trainer_base.TRAINER_REGISTRY
    for name, cls in list(registry.items()):
        if issubclass(cls, MrgrpoAdvantageMixin):
            continue
        sub = type(
            f"Mrgrpo{cls.__name__}",
            (MrgrpoAdvantageMixin, cls),
            {"__module__": __name__, "__doc__": f"verl's {cls.__name__} with mrgrpo's reward components.", _BASE_ATTR: cls},
        )
        registry[name] = sub
    return registry


def uninstall() -> None:
    """Put verl's own trainer classes back in the registry (for tests)."""
    registry = trainer_base.TRAINER_REGISTRY
    for name, cls in list(registry.items()):
        if _BASE_ATTR in cls.__dict__:
            registry[name] = cls.__dict__[_BASE_ATTR]
