"""An mrgrpo estimator bound to verl's settings (``algorithm``, ``algorithm.mrgrpo``): the one
place where verl's side calls :func:`mrgrpo.estimators.binding.bind`, used by the launcher
(before Ray starts), by the advantage computation (once per process) and when verl resumes (the
saved estimator state checked against the run's settings)."""

from __future__ import annotations

from typing import Any

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators.binding import Binding, Host, bind
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig
from mrgrpo.integrations.verl.names import PREFIX


def verl_host(settings: MrgrpoVerlConfig, norm_adv_by_std_in_grpo: bool) -> Host:
    """verl's ``algorithm`` settings as the estimators' :class:`~mrgrpo.estimators.binding.Host`:
    ``norm_adv_by_std_in_grpo=false`` as ``scale="none"``, its eps, token normalization, scores
    for groups of one."""
    return Host(
        "verl",
        scale=None if norm_adv_by_std_in_grpo else "none",
        eps=settings.eps,
        normalization=settings.normalization,
        singleton_scores=settings.singleton_groups == "score",
        options_label="algorithm.mrgrpo.options",
        weights_from="algorithm.mrgrpo.weights",
        ranges_fix="set algorithm.mrgrpo.options.reward_ranges, or algorithm.mrgrpo.suite to take the suite's",
        prefix=PREFIX,
    )


#: Bindings made in this process, by their inputs: verl calls the estimator once per training
#: batch with the same settings, and the binding is checked once.
_BOUND: dict[str, Binding] = {}


def bind_settings(
    estimator: str,
    settings: MrgrpoVerlConfig,
    norm_adv_by_std_in_grpo: bool,
    state: Any = None,
    state_from: str = "the resumed state",
) -> Binding:
    """``estimator`` bound to verl's settings (:func:`mrgrpo.estimators.binding.bind`): the
    components and weights after the suite's defaults (a suite's default weights do not apply
    to an estimator that does not use weights; configured ones are checked), the suite's ranges,
    ``algorithm.mrgrpo.options``, verl's conventions (:func:`verl_host`) and a resumed state.
    Made once per process and settings (the launcher and the trainer each bind before work)."""
    key = repr((estimator, id(mrgrpo.get_estimator(estimator)), settings, norm_adv_by_std_in_grpo)) if state is None else None
    if key is not None and key in _BOUND:
        return _BOUND[key]
    components, weights = resolved_components(settings)
    binding = bind(
        estimator, settings.options, names=components, num_components=None if components else 1,
        ranges=suite_of(settings).reward_ranges if settings.suite else None, weights=weights,
        default_weights=settings.weights is None, host=verl_host(settings, norm_adv_by_std_in_grpo),
        state=state, state_from=state_from,
    )
    if key is not None:
        if len(_BOUND) >= 8:
            _BOUND.clear()
        _BOUND[key] = binding
    return binding


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
        raise ConfigError(f"{len(weights)} weights for {len(components)} components {list(components)}")
    if weights is not None and components is None and len(weights) != 1:
        raise ConfigError(f"{len(weights)} weights given but no components configured (scalar score, K = 1)")
    return components, weights


def check_resumed(config: Any, estimator: str, state: Any, source: str) -> None:
    """Refuse a saved state that does not fit the run's estimator and settings (e.g. one
    multiplier for two constraints), at load: the estimator bound with it
    (:func:`bind_settings`) raises :class:`ConfigError` naming the file."""
    algorithm = config.get("algorithm") if hasattr(config, "get") else getattr(config, "algorithm", None)
    norm = algorithm.get("norm_adv_by_std_in_grpo") if hasattr(algorithm, "get") else None
    bind_settings(estimator, MrgrpoVerlConfig.from_algorithm_config(algorithm), True if norm is None else bool(norm),
                  state=state, state_from=source)


