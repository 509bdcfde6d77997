"""The one wrap of upstream verl code: ``verl.trainer.ppo.ray_trainer.compute_advantage``.

verl's ``compute_advantage`` hands ``non_tensor_batch`` (where the reward manager's per-component
scores live) only to the estimator named ``gdpo``. The wrapper routes ``mrgrpo_*`` estimators to
their registered function *with* ``non_tensor_batch``; every other estimator goes to verl's
original, untouched. No upstream file is edited: the module attribute is replaced, and so is every
module-level alias already imported by name (``verl.trainer.ppo.v1.utils``,
``verl.experimental.separation.ray_trainer``, ...); modules imported later pick up the wrapper.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

from mrgrpo.integrations.verl.adapter import mrgrpo_name

ORIGINAL_ATTR = "_mrgrpo_original"


def wrap_compute_advantage(original: Callable[..., Any]) -> Callable[..., Any]:
    """A ``compute_advantage`` that gives ``mrgrpo_*`` estimators the batch's ``non_tensor_batch``."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        if mrgrpo_name(adv_estimator) is None:
            return original(data, adv_estimator, *args, **kwargs)
        from verl.trainer.ppo import core_algos, ray_trainer

        bound = signature.bind(data, adv_estimator, *args, **kwargs)
        bound.apply_defaults()
        if "response_mask" not in data.batch.keys():  # as verl's original does
            data.batch["response_mask"] = ray_trainer.compute_response_mask(data)
        name = adv_estimator.value if hasattr(adv_estimator, "value") else adv_estimator
        advantages, returns = core_algos.get_adv_estimator_fn(name)(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch.get("uid"),
            config=bound.arguments.get("config"),
            non_tensor_batch=data.non_tensor_batch,
            norm_adv_by_std_in_grpo=bound.arguments.get("norm_adv_by_std_in_grpo", True),
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    setattr(compute_advantage, ORIGINAL_ATTR, original)
    return compute_advantage


def install() -> Callable[..., Any]:
    """Wrap verl's ``compute_advantage`` (idempotent); returns the wrapper in place."""
    from verl.trainer.ppo import ray_trainer

    current = ray_trainer.compute_advantage
    if hasattr(current, ORIGINAL_ATTR):
        wrapped, original = current, getattr(current, ORIGINAL_ATTR)
    else:
        wrapped, original = wrap_compute_advantage(current), current
    _replace_everywhere(original, wrapped)
    return wrapped


def uninstall() -> None:
    """Put verl's original ``compute_advantage`` back everywhere (for tests)."""
    from verl.trainer.ppo import ray_trainer

    current = ray_trainer.compute_advantage
    if hasattr(current, ORIGINAL_ATTR):
        _replace_everywhere(current, getattr(current, ORIGINAL_ATTR))


def _replace_everywhere(old: Callable[..., Any], new: Callable[..., Any]) -> None:
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("compute_advantage") is old:
            namespace["compute_advantage"] = new
