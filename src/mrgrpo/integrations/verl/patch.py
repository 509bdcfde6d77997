"""The wraps of upstream verl code on the legacy trainer (``verl.trainer.ppo.ray_trainer``).

1. ``compute_advantage``: verl hands ``non_tensor_batch`` (where the reward manager's
   per-component scores live) only to the estimator named ``gdpo``. The wrapper routes
   ``mrgrpo_*`` estimators to their registered function *with* ``non_tensor_batch`` (after
   importing the modules of ``algorithm.mrgrpo.import``, so a user's own estimator is found);
   every other estimator goes to verl's original, untouched. The module attribute is replaced,
   and so is every module-level alias already imported by name (``verl.trainer.ppo.v1.utils``,
   ``verl.experimental.separation.ray_trainer``, ...); modules imported later pick up the wrapper.
2. ``RayPPOTrainer._save_checkpoint`` / ``_load_checkpoint``: a stateful estimator's state is
   saved beside verl's checkpoint and restored when verl resumes (:mod:`.state`).
3. ``compute_data_metrics`` (as ``ray_trainer`` calls it): the step's metrics also get the
   state's numeric entries (``mrgrpo/state/...``), carried on the batch's ``meta_info``.
4. ``RayPPOTrainer._update_actor``: after verl's update, the feedback of an estimator that adapts
   from the policy update (``ctwa``; :func:`.feedback.after_update`).

No upstream file is edited; :func:`uninstall` puts every original back.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

from mrgrpo.integrations.verl import feedback
from mrgrpo.integrations.verl import state as estimator_state
from mrgrpo.integrations.verl.names import mrgrpo_name
from mrgrpo.integrations.verl.registration import import_user_modules
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig

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
        settings = MrgrpoVerlConfig.from_algorithm_config(bound.arguments.get("config"))
        if settings.imports or name not in core_algos.ADV_ESTIMATOR_REGISTRY:
            import_user_modules(settings)  # a user's estimator, registered by their module
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
        if estimator_state.STATE.estimator == mrgrpo_name(name) and estimator_state.STATE.metrics:
            data.meta_info[estimator_state.METRICS_KEY] = dict(estimator_state.STATE.metrics)
        return data

    setattr(compute_advantage, ORIGINAL_ATTR, original)
    return compute_advantage


def wrap_data_metrics(original: Callable[..., Any]) -> Callable[..., Any]:
    """``compute_data_metrics`` plus the state metrics the batch carries (``meta_info``)."""

    @functools.wraps(original)
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        extra = getattr(batch, "meta_info", {}).get(estimator_state.METRICS_KEY)
        if extra:
            metrics.update(extra)
        return metrics

    setattr(compute_data_metrics, ORIGINAL_ATTR, original)
    return compute_data_metrics


def wrap_checkpoint(original: Callable[..., Any], after: Callable[[Any], None]) -> Callable[..., Any]:
    """A trainer method that runs verl's ``original`` and then ``after(trainer)`` for ``mrgrpo_*``."""

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if mrgrpo_name(self.config.algorithm.adv_estimator) is not None:
            after(self)
        return result

    setattr(method, ORIGINAL_ATTR, original)
    return method


def wrap_update_actor(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_update_actor`` followed by the held feedback step (:mod:`.feedback`), if any."""

    @functools.wraps(original)
    def _update_actor(self, batch, *args, **kwargs):
        result = original(self, batch, *args, **kwargs)
        feedback.after_update(self, batch)
        return result

    setattr(_update_actor, ORIGINAL_ATTR, original)
    return _update_actor


def install() -> Callable[..., Any]:
    """Wrap verl's ``compute_advantage``, the legacy trainer's checkpoint methods and its
    ``compute_data_metrics`` (idempotent); returns the ``compute_advantage`` wrapper in place."""
    from verl.trainer.ppo import ray_trainer

    current = ray_trainer.compute_advantage
    if hasattr(current, ORIGINAL_ATTR):
        wrapped, original = current, getattr(current, ORIGINAL_ATTR)
    else:
        wrapped, original = wrap_compute_advantage(current), current
    _replace_everywhere(original, wrapped)
    if not hasattr(ray_trainer.compute_data_metrics, ORIGINAL_ATTR):
        ray_trainer.compute_data_metrics = wrap_data_metrics(ray_trainer.compute_data_metrics)
    trainer = ray_trainer.RayPPOTrainer
    for method, after in (("_save_checkpoint", estimator_state.save_after), ("_load_checkpoint", estimator_state.load_after)):
        if not hasattr(getattr(trainer, method), ORIGINAL_ATTR):
            setattr(trainer, method, wrap_checkpoint(getattr(trainer, method), after))
    if not hasattr(trainer._update_actor, ORIGINAL_ATTR):
        trainer._update_actor = wrap_update_actor(trainer._update_actor)
    return wrapped


def uninstall() -> None:
    """Put verl's originals back everywhere (for tests)."""
    from verl.trainer.ppo import ray_trainer

    current = ray_trainer.compute_advantage
    if hasattr(current, ORIGINAL_ATTR):
        _replace_everywhere(current, getattr(current, ORIGINAL_ATTR))
    if hasattr(ray_trainer.compute_data_metrics, ORIGINAL_ATTR):
        ray_trainer.compute_data_metrics = getattr(ray_trainer.compute_data_metrics, ORIGINAL_ATTR)
    for method in ("_save_checkpoint", "_load_checkpoint", "_update_actor"):
        current = getattr(ray_trainer.RayPPOTrainer, method)
        if hasattr(current, ORIGINAL_ATTR):
            setattr(ray_trainer.RayPPOTrainer, method, getattr(current, ORIGINAL_ATTR))


def _replace_everywhere(old: Callable[..., Any], new: Callable[..., Any]) -> None:
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("compute_advantage") is old:
            namespace["compute_advantage"] = new
