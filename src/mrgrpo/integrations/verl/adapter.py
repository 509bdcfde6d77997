"""Shape translation between verl's advantage-estimator call and mrgrpo's core.

verl calls ``fn(token_level_rewards, response_mask, index, config, **kw) -> (advantages, returns)``
with ``token_level_rewards`` / ``response_mask`` of shape ``(bs, response_len)`` and ``index`` the
``uid`` of each rollout (rollouts of one prompt share it). mrgrpo wants ``rewards [N, K]`` and
``group_ids [N]`` and returns one advantage per rollout; we broadcast it over the response tokens
(masked), as verl's outcome estimators do, and return it as both advantages and returns.

On verl's v1 trainer the rows are agent-loop outputs (:mod:`.sessions`): the estimator sees one
row per session (its final output), grouped by ``uid``, and the result is broadcast to the
session's other outputs.

The estimator is bound to verl's settings once per process (:func:`.binding.bind_settings`, the one
place of :func:`mrgrpo.estimators.binding.bind`: options, ranges, weights, roles, verl's
conventions, all read from the estimators' registered traits, never from their names). A
stateful estimator's state is carried across training batches in :data:`.state.STATE`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.estimators.binding import Binding
from mrgrpo.integrations.verl.binding import bind_settings, resolved_components, suite_of  # noqa: F401 (re-exported)
from mrgrpo.integrations.verl.config import VERL_EPS, MrgrpoVerlConfig
from mrgrpo.integrations.verl.feedback import attach_sessions, hold
from mrgrpo.integrations.verl.sessions import Trajectories
from mrgrpo.integrations.verl.state import STATE


def reward_matrix(
    token_level_rewards: Tensor,
    components: tuple[str, ...] | None,
    non_tensor_batch: dict[str, Any] | None,
) -> Tensor:
    """``[N, K]`` float64 rewards: the named ``non_tensor_batch`` columns, or, with no components
    configured, the scalar score ``token_level_rewards.sum(-1)`` as K = 1. ``None`` entries
    (component not scored for that rollout) become NaN."""
    if not components:
        return token_level_rewards.detach().sum(dim=-1, dtype=torch.float64).unsqueeze(1)
    if non_tensor_batch is None:
        raise ConfigError(
            f"mrgrpo estimators configured with components {list(components)} were called without "
            "non_tensor_batch: verl only passes it to 'gdpo', so mrgrpo's wrapper of "
            "verl.trainer.ppo.ray_trainer.compute_advantage must be installed in the trainer "
            "process: import mrgrpo.integrations.verl there (e.g. set the environment variable "
            "VERL_USE_EXTERNAL_MODULES=mrgrpo.integrations.verl in the Ray runtime_env)"
        )
    n = token_level_rewards.shape[0]
    columns = []
    for key in components:
        if key not in non_tensor_batch:
            raise InputError(
                f"reward component {key!r} (algorithm.mrgrpo.components) is not in the batch; available "
                f"non_tensor_batch keys: {sorted(non_tensor_batch)}. The reward function must return a dict "
                f"with a {key!r} entry (verl copies it into reward_extra_info)"
            )
        try:
            column = np.asarray(non_tensor_batch[key], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as error:
            raise InputError(f"reward component {key!r} must hold one number per rollout: {error}") from None
        if column.shape[0] != n:
            raise InputError(f"reward component {key!r} has {column.shape[0]} values for {n} rollouts")
        columns.append(column)
    return torch.from_numpy(np.stack(columns, axis=1)).to(token_level_rewards.device)


def trajectory_matrix(
    token_level_rewards: Tensor, components: tuple[str, ...] | None, trajectories: Trajectories
) -> Tensor:
    """``[N, K]`` float64 rewards of a v1 batch: the components read from the queue, or the
    scalar score as K = 1; verl's padding rows are all NaN (no statistic sees them)."""
    if len(trajectories) != token_level_rewards.shape[0]:
        raise InputError(
            f"{len(trajectories)} TransferQueue keys for {token_level_rewards.shape[0]} rows: rows and keys are not aligned"
        )
    if not components:
        rewards = token_level_rewards.detach().sum(dim=-1, dtype=torch.float64).unsqueeze(1).cpu()
    else:
        missing = [c for c in components if c not in trajectories.columns]
        if missing:
            raise InputError(f"reward components {missing} were not read from the TransferQueue (read: {sorted(trajectories.columns)})")
        rewards = torch.from_numpy(np.stack([trajectories.columns[c] for c in components], axis=1)).to(torch.float64)
    rewards[torch.from_numpy(trajectories.padding)] = float("nan")
    return rewards.to(token_level_rewards.device)


def rollout_values(
    binding: Binding,
    rewards: Tensor,
    group_ids: Any,
    settings: MrgrpoVerlConfig,
    response_mask: Tensor,
) -> Tensor:
    """One float64 advantage per rollout: the bound estimator, then ``singleton_groups`` and the
    ``normalization`` of :class:`MrgrpoVerlConfig` (token whitening is constant per row).

    Shapes: ``rewards (N, K)``, ``group_ids (N,)``, ``response_mask (N, response_len)``.
    """
    name = binding.name
    # (a stateful estimator: the state the previous training batch left)
    incoming = STATE.get(name) if binding.spec.stateful else None
    values, state = binding.compute(rewards, group_ids, incoming)
    if binding.spec.feedback is not None:
        # the state moves after the policy update, from its signal (.feedback); until then the
        # incoming one stays current
        hold(binding, rewards, group_ids, incoming)
        STATE.put(name, incoming)
    elif binding.spec.stateful:
        STATE.put(name, state)
    values = values.to(torch.float64)
    if settings.singleton_groups == "score":
        values = _singleton_scores(binding, values, rewards, group_ids)
    if settings.normalization == "token":
        from verl.utils.torch_functional import masked_whiten  # verl's own, so conventions match

        mask = response_mask.to(torch.float64)
        tokens = masked_whiten(values.unsqueeze(-1) * mask, mask) * mask
        first = mask.argmax(dim=1)  # a row's value sits on each of its response tokens
        per_row = tokens[torch.arange(tokens.shape[0], device=tokens.device), first]
        values = torch.where(mask.sum(dim=1) > 0, per_row, torch.zeros_like(per_row))
    return values


def _singleton_scores(binding: Binding, values: Tensor, rewards: Tensor, group_ids: Any) -> Tensor:
    """verl's value for a group with one scored rollout: ``Σ w_k r_k / (1 + eps)`` (no ``eps``
    term for an unscaled binding); every other row keeps the estimator's value."""
    scored = ~torch.isnan(rewards).all(dim=1)
    keys = group_ids.tolist() if hasattr(group_ids, "tolist") else list(group_ids)
    counts: dict[Any, int] = {}
    for key, ok in zip(keys, scored.tolist()):
        counts[key] = counts.get(key, 0) + int(ok)
    single = torch.tensor([ok and counts[k] == 1 for k, ok in zip(keys, scored.tolist())], device=values.device)
    if not single.any():
        return values
    weights = binding.weights
    w = torch.ones(rewards.shape[1], dtype=torch.float64) if weights is None else torch.tensor(weights, dtype=torch.float64)
    total = (torch.nan_to_num(rewards, nan=0.0) * w.to(rewards.device)).sum(dim=1)
    if not binding.unscaled:
        total = total / (1.0 + float(binding.options.get("eps", binding.spec.options.get("eps", VERL_EPS))))
    return torch.where(single, total.to(values.dtype), values)


def token_advantages(
    estimator: str,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Any,
    config: Any = None,
    non_tensor_batch: dict[str, Any] | None = None,
    norm_adv_by_std_in_grpo: bool | None = None,
    trajectories: Trajectories | None = None,
) -> tuple[Tensor, Tensor]:
    """mrgrpo ``estimator`` in verl's shapes: ``(bs, response_len)`` advantages (= returns).

    Shapes: ``token_level_rewards``, ``response_mask``: ``(bs, response_len)``; ``index``: ``(bs,)``
    uids. Settings come from ``config.mrgrpo`` (see :class:`MrgrpoVerlConfig`). Components come
    from ``non_tensor_batch`` (legacy trainer) or ``trajectories`` (v1 trainer: then the estimator
    runs on each session's final output and the result is broadcast to the session's rows).
    """
    if index is None:
        raise ConfigError(f"mrgrpo_{estimator} needs the rollouts' group ids: verl passes them as index (the 'uid' column)")
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise InputError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must both be (bs, response_len)"
        )
    settings = MrgrpoVerlConfig.from_algorithm_config(config)
    if norm_adv_by_std_in_grpo is None:
        value = config.get("norm_adv_by_std_in_grpo", True) if config is not None and hasattr(config, "get") else True
        norm_adv_by_std_in_grpo = bool(value)
    binding = bind_settings(estimator, settings, norm_adv_by_std_in_grpo)
    components = binding.names
    group_ids = list(index) if isinstance(index, np.ndarray) and index.dtype == object else index
    mask = response_mask.detach()
    if trajectories is None:
        rewards = reward_matrix(token_level_rewards, components, non_tensor_batch)
        rows = None
    else:
        rewards = trajectory_matrix(token_level_rewards, components, trajectories)
        final_rows, rows = trajectories.sessions(group_ids)
        rewards, mask = rewards[torch.from_numpy(final_rows).to(rewards.device)], mask[torch.from_numpy(final_rows).to(mask.device)]
        group_ids = [group_ids[i] for i in final_rows.tolist()]
    with torch.no_grad():
        values = rollout_values(binding, rewards, group_ids, settings, mask)
        if rows is not None and binding.spec.feedback is not None:
            attach_sessions(trajectories.keys, rows)  # the signal after the update is per session
        if rows is not None:
            # as verl's grpo: a session whose final output has no response token passes on 0
            values = torch.where(mask.sum(dim=1) > 0, values, torch.zeros_like(values))
            values = values[torch.from_numpy(rows).to(values.device)]
        advantages = (values.unsqueeze(-1) * response_mask.to(torch.float64)).to(token_level_rewards.dtype)
    return advantages, advantages
