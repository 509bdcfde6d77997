"""Advantage estimators: pure, vectorized functions of reward tensors, dispatched by name.

One module per estimator; each registers itself on import. Use :func:`compute_advantages`.
"""

from mrgrpo.estimators import (  # noqa: F401  (registration)
    constrained_grpo, corpo, corr_grpo, ctwa, ddca, dr_grpo, dvao, gd2po, gdpo, gdpo_loo, grpo, mo_grpo, rvpo, sa_corr_grpo,
    sa_mrpo, saw,
)
from mrgrpo.estimators.binding import Binding, Host, bind
from mrgrpo.estimators.corr_ema import corr_grpo_ema, update_correlation_state
from mrgrpo.estimators.groups import Groups, make_groups
from mrgrpo.estimators.registry import (
    Estimator,
    available_estimators,
    check_reward_values,
    compute_advantages,
    compute_advantages_with_state,
    get_estimator,
    register_estimator,
    validate_options,
)

__all__ = [
    "Binding",
    "Estimator",
    "Host",
    "bind",
    "Groups",
    "available_estimators",
    "check_reward_values",
    "corr_grpo_ema",
    "update_correlation_state",
    "compute_advantages",
    "compute_advantages_with_state",
    "get_estimator",
    "make_groups",
    "register_estimator",
    "validate_options",
]
