"""The TRL trainer's side of binding an estimator to a run, without importing the trainer:
GRPOConfig's settings as a :class:`~mrgrpo.estimators.binding.Host`, the estimator state a
checkpoint holds, and the check of a binding handed to the trainer (``mrgrpo train`` binds
before any model loads and passes the binding on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.estimators.binding import Binding, Host

#: File in each checkpoint directory holding estimator state carried across steps:
#: ``{"estimator": name, "state": <the estimator's JSON state>}``.
ESTIMATOR_STATE_FILE = "mrgrpo_estimator_state.json"


def trl_host(args: Any, weights_from: str = "GRPOConfig(reward_weights)") -> Host:
    """GRPOConfig's advantage settings as the estimators' :class:`~mrgrpo.estimators.binding.Host`
    (TRL's defaults, ``scale_rewards="group"`` and ``multi_objective_aggregation="sum_then_normalize"``,
    mean "no setting": a GRPOConfig cannot tell a default from an explicit value)."""
    fix = "use a RewardSuite, reward functions with a `range` attribute, or estimator_options={'reward_ranges': [(lo, hi), ...]}"
    if args is None:  # no GRPOConfig yet (mrgrpo train binds before building it): no setting
        return Host("trl", weights_from=weights_from, ranges_fix=fix)
    from mrgrpo.train import trl_compat

    defaults = trl_compat.config_defaults()
    aggregation = getattr(args, "multi_objective_aggregation", defaults["multi_objective_aggregation"])
    scale = getattr(args, "scale_rewards", defaults["scale_rewards"])
    scale = {True: "group", False: "none"}.get(scale, scale) if isinstance(scale, (bool, str)) else scale
    return Host(
        "trl",
        aggregation=None if aggregation == defaults["multi_objective_aggregation"] else aggregation,
        scale=None if scale == defaults["scale_rewards"] else scale,
        default_aggregation=defaults["multi_objective_aggregation"],
        weights_from=weights_from,
        ranges_fix=fix,
    )


def read_estimator_state(path: Path, estimator: str) -> dict[str, Any] | None:
    """The state in a checkpoint's :data:`ESTIMATOR_STATE_FILE`, saved by ``estimator`` (a state
    saved by another estimator, or an unreadable file, raises :class:`ConfigError`)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: the estimator state cannot be read ({type(error).__name__})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{path}: the estimator state file must hold a mapping")
    saved_by = record.get("estimator", estimator)
    if saved_by != estimator:
        raise ConfigError(
            f"{path}: the estimator state was saved by {saved_by!r}, this run trains {estimator!r}: "
            "resume with the run's own estimator"
        )
    # ("correlation_ema": the key of checkpoints written before the state protocol)
    return record.get("state", record.get("correlation_ema"))


def check_given_binding(
    binding: Binding,
    host: Host,
    names: list[str] | None,
    weights: Any,
    estimator: str | None,
    options: dict[str, Any] | None,
    correlation_ema: float | None,
) -> None:
    """A ``binding=`` handed to the trainer must be for its components, weights and GRPOConfig."""
    if estimator is not None or options or correlation_ema is not None:
        raise ConfigError("pass either binding= or estimator=/estimator_options=/correlation_ema=, not both")
    if binding.partial:
        raise ConfigError("binding= was bound without the components (partial=True): bind it with the suite's names")
    if names is not None and binding.names is not None and list(binding.names) != list(names):
        raise ConfigError(f"binding= was bound to components {list(binding.names)}, the trainer has {names}")
    ones = [1.0] * len(names or ())
    mine = [float(w) for w in weights] if weights is not None else ones
    if (list(binding.weights) if binding.weights is not None else ones) != mine:
        raise ConfigError(f"binding= was bound with weights {binding.weights}, the trainer has {mine}: bind with the run's weights")
    if (host.aggregation, host.scale) != (binding.host.aggregation, binding.host.scale):
        raise ConfigError(
            "binding= was bound without this GRPOConfig's advantage settings: bind with host=trl_host(args)"
        )


