"""mrgrpo: multi-reward GRPO advantage estimators, reward suites and training.

The core API::

    import mrgrpo
    adv = mrgrpo.compute_advantages(rewards, group_ids, estimator="corr_grpo")
    report = mrgrpo.diagnose(rewards, group_ids)
"""

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
