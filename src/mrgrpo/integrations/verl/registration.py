"""verl's registry side of the integration: every mrgrpo estimator as a verl advantage estimator
(``mrgrpo_<name>`` in ``core_algos.ADV_ESTIMATOR_REGISTRY``), and the user modules named in
``algorithm.mrgrpo.import`` that register more of them."""

from __future__ import annotations

from typing import Any

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.extras import require, require_package
from mrgrpo.integrations.verl.adapter import token_advantages
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig
from mrgrpo.integrations.verl.names import verl_name
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


def import_user_modules(settings: MrgrpoVerlConfig) -> list[str]:
    """Import the modules named in ``algorithm.mrgrpo.import`` (where users register their own
    estimators) and register every estimator with verl; returns verl's ``mrgrpo_*`` names.
    Called before an estimator is looked up, in whichever process does the lookup."""
    import importlib

    for module in settings.imports:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(
                f"algorithm.mrgrpo.import: cannot import {module!r} ({error}); the module must be importable "
                "in every Ray worker (installed, or on PYTHONPATH via ray_kwargs.ray_init.runtime_env)"
            ) from None
    return register_all()
