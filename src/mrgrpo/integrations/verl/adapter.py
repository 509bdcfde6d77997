"""Shape translation between verl's advantage-estimator call and mrgrpo's core.

verl calls ``fn(token_level_rewards, response_mask, index, config, **kw) -> (advantages, returns)``
with ``token_level_rewards`` / ``response_mask`` of shape ``(bs, response_len)`` and ``index`` the
``uid`` of each rollout (rollouts of one prompt share it). mrgrpo wants ``rewards [N, K]`` and
``group_ids [N]`` and returns one advantage per rollout; we broadcast it over the response tokens
(masked), as verl's outcome estimators do, and return it as both advantages and returns.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np
import torch
from torch import Tensor

import mrgrpo
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig

PREFIX = "mrgrpo_"


def verl_name(estimator: str) -> str:
    """The name an mrgrpo estimator has in verl's registry."""
    return PREFIX + estimator


def mrgrpo_name(adv_estimator: Any) -> str | None:
    """The mrgrpo estimator behind a verl ``adv_estimator`` value, or ``None`` if not ours."""
    name = adv_estimator.value if isinstance(adv_estimator, Enum) else adv_estimator
    if isinstance(name, str) and name.startswith(PREFIX):
        return name[len(PREFIX):]
    return None


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
        raise ValueError(
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
            raise KeyError(
                f"reward component {key!r} (algorithm.mrgrpo.components) is not in the batch; available "
                f"non_tensor_batch keys: {sorted(non_tensor_batch)}. The reward function must return a dict "
                f"with a {key!r} entry (verl copies it into reward_extra_info). Note: verl 0.9.1's v1 "
                "trainer (trainer.use_v1=true) hands advantage estimators only uid and rm_scores, "
                "so per-component scores need trainer.use_v1=false"
            )
        try:
            column = np.asarray(non_tensor_batch[key], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as error:
            raise ValueError(f"reward component {key!r} must hold one number per rollout: {error}") from None
        if column.shape[0] != n:
            raise ValueError(f"reward component {key!r} has {column.shape[0]} values for {n} rollouts")
        columns.append(column)
    return torch.from_numpy(np.stack(columns, axis=1)).to(token_level_rewards.device)


def estimator_options(
    estimator: str, settings: MrgrpoVerlConfig, norm_adv_by_std_in_grpo: bool, num_components: int
) -> dict[str, Any]:
    """The keyword options for ``mrgrpo.compute_advantages``: ``settings.options`` plus verl's
    conventions mapped onto mrgrpo's option names (``eps``; ``norm_adv_by_std_in_grpo=False`` ->
    GRPO's ``scale="none"``; token whitening -> ``batch_norm=False``; suite ranges)."""
    spec = mrgrpo.get_estimator(estimator)
    options = dict(settings.options)
    spec.check_options(options)
    if "eps" in spec.options and "eps" not in options and settings.eps is not None:
        options["eps"] = settings.eps
    if not norm_adv_by_std_in_grpo:
        if estimator == "grpo":
            if options.setdefault("scale", "none") != "none":
                raise ValueError(
                    f"algorithm.norm_adv_by_std_in_grpo=false conflicts with mrgrpo option scale={options['scale']!r}"
                )
        elif estimator != "dr_grpo":
            raise ValueError(
                f"algorithm.norm_adv_by_std_in_grpo=false has no meaning for mrgrpo_{estimator}; set it "
                "to true (use mrgrpo_dr_grpo for unscaled advantages)"
            )
    if settings.normalization == "token":
        if "batch_norm" not in spec.options:
            raise ValueError(
                f"algorithm.mrgrpo.normalization='token' replaces a final batch normalization, which "
                f"mrgrpo_{estimator} does not have; estimators with one: "
                f"{[n for n in mrgrpo.available_estimators() if 'batch_norm' in mrgrpo.get_estimator(n).options]}"
            )
        if options.get("batch_norm") is True:
            raise ValueError("algorithm.mrgrpo.normalization='token' conflicts with option batch_norm=true")
        options["batch_norm"] = False
    if "reward_ranges" in spec.options and options.get("reward_ranges") is None and settings.suite:
        options["reward_ranges"] = [list(r) for r in suite_of(settings).reward_ranges]
    if options.get("reward_ranges") is not None and len(options["reward_ranges"]) != num_components:
        raise ValueError(
            f"reward_ranges has {len(options['reward_ranges'])} entries for {num_components} components"
        )
    return options


def suite_of(settings: MrgrpoVerlConfig):
    from mrgrpo.rewards import get_suite  # lazy: reward suites pull in math-verify & co.

    return get_suite(settings.suite, **settings.suite_options)


def resolved_components(settings: MrgrpoVerlConfig) -> tuple[tuple[str, ...] | None, tuple[float, ...] | None]:
    """Component keys and weights after the suite defaults."""
    components, weights = settings.components, settings.weights
    if settings.suite:
        suite = suite_of(settings)
        if components is None:
            components = tuple(suite.names)
            if weights is None:
                weights = tuple(suite.weights)
        elif weights is None:
            by_name = dict(zip(suite.names, suite.weights))
            weights = tuple(by_name.get(c, 1.0) for c in components)
    if weights is not None and components is not None and len(weights) != len(components):
        raise ValueError(f"{len(weights)} weights for {len(components)} components {list(components)}")
    if weights is not None and components is None and len(weights) != 1:
        raise ValueError(f"{len(weights)} weights given but no components configured (scalar score, K = 1)")
    return components, weights


def token_advantages(
    estimator: str,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Any,
    config: Any = None,
    non_tensor_batch: dict[str, Any] | None = None,
    norm_adv_by_std_in_grpo: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """mrgrpo ``estimator`` in verl's shapes: ``(bs, response_len)`` advantages (= returns).

    Shapes: ``token_level_rewards``, ``response_mask``: ``(bs, response_len)``; ``index``: ``(bs,)``
    uids. Settings come from ``config.mrgrpo`` (see :class:`MrgrpoVerlConfig`).
    """
    if index is None:
        raise ValueError(f"mrgrpo_{estimator} needs the rollouts' group ids: verl passes them as index (the 'uid' column)")
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must both be (bs, response_len)"
        )
    settings = MrgrpoVerlConfig.from_algorithm_config(config)
    if norm_adv_by_std_in_grpo is None:
        value = config.get("norm_adv_by_std_in_grpo", True) if config is not None and hasattr(config, "get") else True
        norm_adv_by_std_in_grpo = bool(value)
    components, weights = resolved_components(settings)
    rewards = reward_matrix(token_level_rewards, components, non_tensor_batch)
    options = estimator_options(estimator, settings, norm_adv_by_std_in_grpo, rewards.shape[1])
    group_ids = list(index) if isinstance(index, np.ndarray) and index.dtype == object else index
    with torch.no_grad():
        per_rollout = mrgrpo.compute_advantages(rewards, group_ids, estimator=estimator, weights=weights, **options)
        mask = response_mask.to(torch.float64)
        advantages = per_rollout.to(torch.float64).unsqueeze(-1) * mask
        if settings.normalization == "token":
            from verl.utils.torch_functional import masked_whiten  # verl's own, so conventions match

            advantages = masked_whiten(advantages, mask) * mask
        advantages = advantages.to(token_level_rewards.dtype)
    return advantages, advantages
