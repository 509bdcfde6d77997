"""mrgrpo: multi-reward GRPO advantage estimators, reward suites and training.

The core API::

    import mrgrpo
    adv = mrgrpo.compute_advantages(rewards, group_ids, estimator="corr_grpo")
    report = mrgrpo.diagnose(rewards, group_ids)

The names below are loaded on first use (PEP 562 ``__getattr__``): ``import mrgrpo`` and the
command line's startup (``mrgrpo --help``, ``mrgrpo configs``) import neither the estimators nor
torch; the first ``mrgrpo.compute_advantages`` (or ``from mrgrpo import diagnose``) does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads them
    from mrgrpo.diagnostics import diagnose
    from mrgrpo.estimators import (
        available_estimators,
        compute_advantages,
        compute_advantages_with_state,
        corr_grpo_ema,
        get_estimator,
        register_estimator,
        validate_options,
    )

__version__ = "0.1.0"

#: Each public name and the module that defines it (imported on first access).
_LAZY = {
    "available_estimators": "mrgrpo.estimators",
    "compute_advantages": "mrgrpo.estimators",
    "compute_advantages_with_state": "mrgrpo.estimators",
    "corr_grpo_ema": "mrgrpo.estimators",
    "diagnose": "mrgrpo.diagnostics",
    "get_estimator": "mrgrpo.estimators",
    "register_estimator": "mrgrpo.estimators",
    "validate_options": "mrgrpo.estimators",
}

__all__ = [
    "available_estimators",
    "compute_advantages",
    "compute_advantages_with_state",
    "corr_grpo_ema",
    "diagnose",
    "get_estimator",
    "register_estimator",
    "validate_options",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mrgrpo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
