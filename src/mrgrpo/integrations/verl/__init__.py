"""mrgrpo estimators inside an unmodified verl (Ray, FSDP/Megatron, vLLM/SGLang, multi-node).

Importing this module:

1. registers every mrgrpo estimator in verl's advantage-estimator registry as ``mrgrpo_<name>``
   (``algorithm.adv_estimator=mrgrpo_corr_grpo``); :func:`register_all` adds estimators
   registered later; re-importing is idempotent;
2. legacy trainer (``trainer.use_v1=false``): wraps ``verl.trainer.ppo.ray_trainer.compute_advantage``
   once (:mod:`.patch`) so our estimators receive ``non_tensor_batch``, i.e. the per-component
   scores that the reward function returned (keys named in ``algorithm.mrgrpo.components``,
   see :mod:`.config`);
3. v1 trainer (``trainer.use_v1=true``, verl's default; needs ``transferqueue``): replaces each
   trainer of verl's v1 registry by a subclass that hands our estimators the components from
   the TransferQueue and groups multi-turn sessions by their final output (:mod:`.v1`).

It must be imported in the process that runs the trainer (a Ray actor): launch with
``python -m mrgrpo.integrations.verl <verl overrides>`` (verl's ``main_ppo`` with the
integration loaded everywhere), or set ``VERL_USE_EXTERNAL_MODULES=mrgrpo.integrations.verl`` in
the Ray runtime_env yourself (verl imports the listed modules whenever ``verl`` is imported).

Conventions (``mrgrpo_grpo`` equals verl's ``grpo``; ``mrgrpo_gdpo`` with
``algorithm.mrgrpo.normalization=token`` equals verl's ``gdpo``): eps defaults to verl's 1e-6,
stds are unbiased, ``norm_adv_by_std_in_grpo=false`` maps to GRPO's ``scale="none"``. mrgrpo's
default final normalization (gdpo, sa_mrpo) is per rollout, as in TRL; ``normalization=token``
uses verl's ``masked_whiten`` over response tokens instead. One deliberate difference: verl gives a
group of a single rollout its raw score as advantage, mrgrpo gives 0 (``singleton_groups: score``
restores verl's value).
"""

from __future__ import annotations

from typing import Any

import mrgrpo
from mrgrpo.extras import require, require_package
from mrgrpo.integrations.verl.adapter import PREFIX, mrgrpo_name, token_advantages, verl_name
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig
from mrgrpo.integrations.verl.patch import install, uninstall
from mrgrpo.integrations.verl.sessions import current as current_trajectories

_MARK = "_mrgrpo_estimator"


def _make_verl_estimator(estimator: str):
    def fn(
        token_level_rewards,
        response_mask,
        index=None,
        config=None,
        non_tensor_batch=None,
        norm_adv_by_std_in_grpo=None,
        **kwargs: Any,
    ):
        return token_advantages(
            estimator,
            token_level_rewards,
            response_mask,
            index,
            config,
            non_tensor_batch,
            norm_adv_by_std_in_grpo,
            trajectories=current_trajectories(),  # set by the v1 trainer (.v1), None on legacy
        )

    fn.__name__ = fn.__qualname__ = f"compute_{verl_name(estimator)}_advantage"
    fn.__doc__ = f"mrgrpo estimator {estimator!r} in verl's signature; see mrgrpo.integrations.verl."
    setattr(fn, _MARK, estimator)
    return fn


def register_all() -> list[str]:
    """Register every mrgrpo estimator not yet in verl's registry; returns all ``mrgrpo_*`` names.

    A name already taken by something else than an mrgrpo estimator raises (verl's own rule).
    """
    require_package("verl", "the verl integration")
    require("verl", "the verl integration")
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for estimator in mrgrpo.available_estimators():
        name = verl_name(estimator)
        existing = registry.get(name)
        if existing is not None and getattr(existing, _MARK, None) == estimator:
            continue  # ours (also after a module reload)
        core_algos.register_adv_est(name)(_make_verl_estimator(estimator))
    return sorted(n for n, f in registry.items() if hasattr(f, _MARK))


def install_v1() -> bool:
    """Wrap verl's v1 trainers (:mod:`.v1`); ``False`` where verl's v1 trainer cannot be imported
    (e.g. ``transferqueue`` missing: then verl's v1 trainer cannot run in this process either)."""
    try:
        from mrgrpo.integrations.verl import v1
    except ImportError:
        return False
    v1.install()
    return True


register_all()
install()
install_v1()

__all__ = [
    "PREFIX",
    "MrgrpoVerlConfig",
    "install",
    "install_v1",
    "mrgrpo_name",
    "register_all",
    "token_advantages",
    "uninstall",
    "verl_name",
]
