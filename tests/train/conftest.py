"""Shared fixtures of the training tests: tiny-preset configs and a run directory."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mrgrpo.train.defaults import TINY_CONFIG


def tiny_config(**changes: Any) -> dict[str, Any]:
    """The tiny preset's config with top-level changes (``trainer`` entries merged)."""
    data = copy.deepcopy(TINY_CONFIG)
    trainer = changes.pop("trainer", {})
    data.update(changes)
    data["trainer"].update(trainer)
    return data


@pytest.fixture
def tiny() -> Any:
    return tiny_config


#: The CPU settings of the short trainer runs the tests build by hand (TRL scripts, parity).
TINY_GRPO_SETTINGS: dict[str, Any] = {
    "max_completion_length": 8,
    "learning_rate": 1e-3,
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "report_to": "none",
    "save_strategy": "no",
    "logging_steps": 1,
    "disable_tqdm": True,
    "seed": 0,
}


def tiny_grpo_config(output_dir: Any, **settings: Any) -> Any:
    """A TRL ``GRPOConfig`` for a few CPU steps in ``output_dir``: :data:`TINY_GRPO_SETTINGS`, then ``settings``."""
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(output_dir), **{**TINY_GRPO_SETTINGS, **settings})


def estimator_config(name: str, **changes: Any) -> dict[str, Any]:
    """:func:`tiny_config` training ``name`` with its registered ``example_options``; the
    components its roles name weigh 1 (a role's component enters through its role, e.g. a cost
    through its multiplier), the others keep the tiny suite's weights (all 1 for an estimator
    registered with ``uses_weights=False``, which refuses any other)."""
    import mrgrpo

    spec = mrgrpo.get_estimator(name)
    data = tiny_config(estimator=name, estimator_options=dict(spec.example_options), **changes)
    named: list[int] = []
    for role in spec.roles:
        value = spec.example_options.get(role)
        named += value if isinstance(value, list) else [] if value is None else [value]
    weights = data["rewards"]["weights"]
    for index, component in enumerate(list(weights)):
        if index in named or not spec.uses_weights:  # (an estimator without weights refuses any but 1)
            weights[component] = 1.0
    return data
