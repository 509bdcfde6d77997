"""An estimator bound to a run: options, components, ranges, weights, host settings and a
resumed state, validated once, in one place, before any model loads.

Every entry point (the TRL trainer, the verl adapter and launcher, ``mrgrpo train`` with
``--check`` and ``--resume``, ``compare``, ``advantages``, ``diagnose``, ``analyze``) calls
:func:`bind` (``mrgrpo.estimators.bind``) with what it knows and hands the resulting
:class:`Binding` on; none of them fills ranges, maps weights
or checks options on its own. Everything is read from the estimator's registered traits, so an
estimator registered later, a user's included, is bound the same way::

    binding = bind("sa_mrpo", {"gamma": 1.0}, names=suite.names, ranges=suite.reward_ranges,
                   weights=suite.weights)
    advantages, state = binding.compute(rewards, group_ids)

What :func:`bind` checks, in order (each failure one :class:`~mrgrpo.errors.ConfigError` line
naming the setting and the fix):

1. the option names (the registry's wording: ``<required>`` for an option without default);
2. the host's settings (:class:`Host`): TRL's ``multi_objective_aggregation`` against the
   estimator's ``combine``, TRL's ``scale_rewards`` / verl's ``norm_adv_by_std_in_grpo=false``
   mapped onto its ``scale_option`` (or agreed with by an ``unscaled`` one), verl's ``eps`` and
   token ``normalization`` (which replaces a ``batch_norm``); a contradiction is refused, never
   silently replaced;
3. ``reward_ranges`` for an estimator that ``needs_ranges``: taken from ``ranges`` (a suite's)
   unless the options give them, one pair per component;
4. every option value and role (:func:`~mrgrpo.estimators.registry.validate_options`; roles by
   component name or index);
5. the weights: one finite number per component; an estimator registered with
   ``uses_weights=False`` refuses any weight but 1 (or 0), as its function does;
6. a resumed state: plain JSON data, only for a ``stateful`` estimator;
7. a dry step: the estimator runs once on a small synthetic batch of ``K`` components with the
   bound options, weights and state, so whatever its first real step would refuse without
   looking at the data (a cost's weight under ``constrained_grpo``, a saved state holding one
   multiplier for two constraints, a user estimator's own option checks) is refused now.

The binding is immutable; its :attr:`Binding.options` are the resolved options (roles as
indices, ranges filled, host settings applied) and :meth:`Binding.compute` is the one way to run
it. Pure Python and torch: no trainer, no I/O (adapters read files and configs and pass values).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.estimators.registry import (
    COMBINES,
    Estimator,
    available_estimators,
    compute_advantages_with_state,
    get_estimator,
    trl_default_estimator,
    validate_options,
)


@dataclass(frozen=True)
class Host:
    """The settings of the trainer an estimator runs in that bear on its advantages, as plain
    values (each adapter reads them from its own config: GRPOConfig, verl's ``algorithm``), and
    the words its messages use.

    Attributes:
        kind: ``"trl"``, ``"verl"`` or ``"core"`` (no trainer: the CLI, a script).
        aggregation: TRL's ``multi_objective_aggregation`` when not TRL's default
            (``default_aggregation``); ``None``: no setting.
        scale: TRL's ``scale_rewards`` when not its default, or ``"none"`` for verl's
            ``norm_adv_by_std_in_grpo=false``; ``None``: no setting.
        default_aggregation: TRL's default aggregation (what ``estimator=None`` falls back to).
        eps: the host's epsilon, used as the estimator's ``eps`` option where it has one and the
            options do not set it (verl's 1e-6); ``None``: the estimator's default.
        normalization: ``"token"`` (verl's whitening) replaces the estimator's final batch
            normalization (its ``batch_norm`` option set to False); ``"rollout"``: unchanged.
        singleton_scores: the host gives a group of one its weighted score after the estimator
            (verl's ``singleton_groups: score``): refused where the estimator's own final batch
            normalization would mix it in (``normalization="rollout"``).
        options_label: prefix of messages about option values (``algorithm.mrgrpo.options``).
        weights_from: the setting that holds the weights, for messages (``GRPOConfig(reward_weights)``).
        ranges_fix: how to give ``reward_ranges`` there, for the message when they are missing.
        prefix: how the host spells estimator names (verl: ``mrgrpo_``).
    """

    kind: str = "core"
    aggregation: str | None = None
    scale: str | None = None
    default_aggregation: str = COMBINES[0]
    eps: float | None = None
    normalization: str = "rollout"
    singleton_scores: bool = False
    options_label: str = ""
    weights_from: str = ""
    ranges_fix: str = "give reward_ranges=[(lo, hi), ...], one per component"
    prefix: str = ""

    def named(self, estimator: str) -> str:
        return f"{self.prefix}{estimator}"

    def default_estimator(self) -> str:
        """The estimator a trainer runs when none is named: the one reproducing the host's own
        advantages for its aggregation (its ``trl_default`` trait)."""
        known = self.aggregation in COMBINES[:2]
        return trl_default_estimator(self.aggregation if known else self.default_aggregation)


@dataclass(frozen=True)
class Binding:
    """An estimator bound to a run (see the module docstring); build it with :func:`bind`.

    Attributes:
        spec: the registered :class:`~mrgrpo.estimators.registry.Estimator`.
        options: the resolved options, read-only (roles as indices where the component names
            were known, ``reward_ranges`` filled, host settings applied).
        names: the component names (``None`` where not known: a partial binding).
        num_components: K (``None`` where not known).
        ranges: each component's ``(lo, hi)`` where known.
        weights: the run's weights (``None``: all 1), checked; the estimator receives
            :attr:`estimator_weights`.
        state: the state a resumed run starts from (``None``: the first step), checked.
        host: the host settings it was bound with.
        partial: bound before the components were known (a config read without its suite):
            checked as far as possible; bind again with the components before training.
    """

    spec: Estimator
    options: Mapping[str, Any]
    names: tuple[str, ...] | None = None
    num_components: int | None = None
    ranges: tuple[tuple[float, float], ...] | None = None
    weights: tuple[float, ...] | None = None
    state: Mapping[str, Any] | None = None
    host: Host = field(default_factory=Host)
    partial: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def estimator_weights(self) -> tuple[float, ...] | None:
        """The weights the estimator is called with: the run's, or none (all 1) for an
        estimator registered with ``uses_weights=False`` (bind refused any other weight)."""
        return self.weights if self.spec.uses_weights else None

    @property
    def unscaled(self) -> bool:
        """Whether the bound estimator never divides by a std: an ``unscaled`` one, or its
        ``scale_option`` set to ``"none"``."""
        key = self.spec.scale_option
        return self.spec.unscaled or (key is not None and self.options.get(key) == "none")

    def weights_for_estimator(self, weights: Any) -> Any:
        """``weights`` (the run's, in any form) as the estimator takes them: ``None`` for an
        estimator that does not use weights."""
        return weights if self.spec.uses_weights else None

    def call_options(self) -> dict[str, Any]:
        """A fresh copy of :attr:`options` to call the estimator with."""
        return copy.deepcopy(dict(self.options))

    def initial_state(self) -> dict[str, Any] | None:
        """A fresh copy of the resumed :attr:`state` (``None``: start from the first step)."""
        return copy.deepcopy(dict(self.state)) if self.state is not None else None

    def resume(self, state: Any, source: str = "the resumed state") -> Binding:
        """This binding with ``state`` as the state to resume from, checked (module docstring,
        steps 6-7); ``source`` names where it came from in messages (a checkpoint file)."""
        _check_state_data(self.spec, state, source, self.host)
        resumed = replace(self, state=MappingProxyType(copy.deepcopy(state)) if state is not None else None)
        if state is not None:
            _dry_step(resumed, f"{source}: the saved estimator state does not fit this run: ")
        return resumed

    def compute(self, rewards: Any, group_ids: Any, state: Any = None) -> tuple[Any, dict[str, Any] | None]:
        """``(advantages [N], new_state)`` of a reward batch ``[N, K]`` with the bound options and
        weights (``state``: what the previous training batch returned; ``None`` the first)."""
        return compute_advantages_with_state(
            rewards, group_ids, self.name, self.estimator_weights, state=state if self.spec.stateful else None,
            **self.call_options(),
        )

    def advantages(self, rewards: Any, group_ids: Any) -> Any:
        """The advantages alone, from the resumed state (or the first step's)."""
        return self.compute(rewards, group_ids, self.initial_state())[0]


def bind(
    estimator: str | Estimator | None,
    options: Mapping[str, Any] | None = None,
    *,
    names: Sequence[str] | None = None,
    num_components: int | None = None,
    ranges: Sequence[Sequence[float]] | None = None,
    weights: Sequence[float] | None = None,
    default_weights: bool = False,
    host: Host | None = None,
    state: Any = None,
    state_from: str = "the resumed state",
    correlation_ema: float | None = None,
    partial: bool = False,
    dry_step: bool = True,
) -> Binding:
    """Bind ``estimator`` to a run; see the module docstring for what is checked.

    Args:
        estimator: a registered name or :class:`Estimator`; ``None``: the host's default
            (:meth:`Host.default_estimator`).
        options: the estimator's options as the user gave them.
        names: the component names (roles may then name components); K = ``len(names)``.
        num_components: K where the names are not known.
        ranges: each component's ``(lo, hi)`` (a suite's ``reward_ranges``): fills the
            ``reward_ranges`` option of an estimator that ``needs_ranges`` unless given.
        weights: the run's component weights (``None``: all 1).
        default_weights: ``weights`` are a suite's defaults, not a setting: an estimator that
            does not use weights runs without them (rather than refusing them).
        host: the trainer's settings (:class:`Host`; default none).
        state: a saved state to resume from (``None``: the first step); ``state_from`` names
            where it came from in messages.
        correlation_ema: the trainers' shortcut for the option of that name (with the
            estimators that have it): a decay in (0, 1).
        partial: the components are not known yet (a config read before its suite is built):
            role names stay names, a missing ``reward_ranges`` is allowed, and the dry step runs
            on a guessed K.
        dry_step: run the estimator once on a synthetic batch (step 7); ``False`` for a caller
            that runs it on its data right away (the same errors come from that call).

    Raises:
        ConfigError: one line naming the setting and the fix (an unknown estimator:
            :class:`~mrgrpo.errors.UnknownNameError`).
    """
    host = host or Host()
    if estimator is None:
        estimator = host.default_estimator()
    spec = estimator if isinstance(estimator, Estimator) else get_estimator(estimator)
    label = f"{host.options_label}: " if host.options_label else ""
    options = dict(options or {})
    try:
        spec.check_options(options)
    except ConfigError as error:
        raise ConfigError(f"{label}{error}") from None
    options = apply_host(spec, options, host)
    if correlation_ema is not None:
        options = with_correlation_ema(spec, options, correlation_ema)
    if names is not None:
        names = tuple(str(n) for n in names)
        num_components = len(names)
    k = num_components
    if ranges is not None:
        ranges = tuple((float(lo), float(hi)) for lo, hi in ranges)
    if spec.needs_ranges and options.get("reward_ranges") is None and ranges is not None:
        options["reward_ranges"] = [tuple(r) for r in ranges]
    given = options.get("reward_ranges")
    if k is not None and isinstance(given, (list, tuple)) and len(given) != k:
        where = f" ({', '.join(names)})" if names else ""
        raise ConfigError(
            f"{label}{host.named(spec.name)}: reward_ranges has {len(given)} entries for {k} components{where}: "
            f"reward_ranges must be {k} pairs (lo, hi), one per component"
        )
    if spec.needs_ranges and given is None and not partial:
        count = f" ({k}{': ' + ', '.join(names) if names else ''})" if k is not None else ""
        raise ConfigError(
            f"{host.named(spec.name)} needs reward_ranges: one (lo, hi) per component{count}: {host.ranges_fix}"
        )
    try:
        resolved = validate_options(spec, options, k, list(names) if names is not None else None, partial=partial)
    except ConfigError as error:
        raise ConfigError(f"{label}{error}") from None
    if default_weights and not spec.uses_weights:
        weights = None
    checked_weights = _check_weights(spec, weights, k, host)
    binding = Binding(
        spec, MappingProxyType(copy.deepcopy(resolved)), names, k, ranges, checked_weights, None, host, partial,
    )
    if dry_step:
        _dry_step(binding, label)
    if state is not None:
        binding = binding.resume(state, state_from)
    return binding


def apply_host(spec: Estimator, options: dict[str, Any], host: Host) -> dict[str, Any]:
    """``options`` with the host's settings mapped onto the estimator's traits (module
    docstring, step 2); a contradiction raises :class:`ConfigError`."""
    options = dict(options)
    name = spec.name
    if host.aggregation is not None and host.aggregation != host.default_aggregation and spec.combine != host.aggregation:
        family = [n for n in available_estimators() if get_estimator(n).combine == host.aggregation]
        if family:
            first = next((n for n in family if get_estimator(n).trl_default == host.aggregation), family[0])
            rest = [n for n in family if n != first]
            fix = f"estimator={first!r}" + (f" (or {', '.join(repr(n) for n in rest)})" if rest else "")
        else:
            fix = "a matching estimator"
        raise ConfigError(
            f"GRPOConfig(multi_objective_aggregation={host.aggregation!r}) contradicts estimator {name!r}, "
            f"which combines components its own way: use {fix} or drop the setting"
        )
    if host.scale is not None:
        options = _apply_scale(spec, options, host)
    if host.eps is not None and "eps" in spec.options and "eps" not in options:
        options["eps"] = host.eps
    if host.normalization == "token":
        if not spec.batch_norm or "batch_norm" not in spec.options:
            takers = [
                n for n in available_estimators() if get_estimator(n).batch_norm and "batch_norm" in get_estimator(n).options
            ]
            raise ConfigError(
                f"algorithm.mrgrpo.normalization='token' replaces a final batch normalization, which "
                f"{host.named(name)} does not have (or cannot turn off); estimators with one: {takers}"
            )
        if options.get("batch_norm") is True:
            raise ConfigError("algorithm.mrgrpo.normalization='token' conflicts with option batch_norm=true")
        options["batch_norm"] = False
    if host.singleton_scores and host.normalization == "rollout" and spec.batch_norm and options.get("batch_norm", True) is not False:
        raise ConfigError(
            f"algorithm.mrgrpo.singleton_groups='score' with normalization='rollout' would be mixed into "
            f"{host.named(name)}'s own batch normalization; use normalization='token' (verl's convention) "
            "or singleton_groups='zero'"
        )
    return options


def _apply_scale(spec: Estimator, options: dict[str, Any], host: Host) -> dict[str, Any]:
    """TRL's ``scale_rewards`` / verl's ``norm_adv_by_std_in_grpo=false`` onto the estimator."""
    scale, name = host.scale, spec.name
    if spec.scale_option is not None:
        key = spec.scale_option
        if options.get(key, scale) != scale:
            if host.kind == "verl":
                raise ConfigError(
                    f"algorithm.norm_adv_by_std_in_grpo=false conflicts with mrgrpo option {key}={options[key]!r}"
                )
            raise ConfigError(
                f"GRPOConfig(scale_rewards={scale!r}) contradicts estimator_options {key}={options[key]!r}: set one of them"
            )
        options[key] = scale
    elif not (spec.unscaled and scale == "none"):
        if host.kind == "verl":
            unscaled = [host.named(n) for n in available_estimators() if get_estimator(n).unscaled]
            raise ConfigError(
                f"algorithm.norm_adv_by_std_in_grpo=false has no meaning for {host.named(name)}; set it "
                f"to true (use {' or '.join(unscaled) or 'an unscaled estimator'} for unscaled advantages)"
            )
        base = get_estimator(trl_default_estimator(host.default_aggregation))
        raise ConfigError(
            f"GRPOConfig(scale_rewards={scale!r}) has no meaning for estimator {name!r}, which scales "
            f"its own way (TRL ignores it under normalize_then_sum too): drop it, or use estimator={base.name!r} "
            f"with estimator_options={{{base.scale_option!r}: {scale!r}}}"
        )
    return options


def with_correlation_ema(spec: Estimator, options: dict[str, Any], decay: Any) -> dict[str, Any]:
    """``options`` with the trainers' ``correlation_ema`` decay set as the estimator's option of
    that name (the estimators that have it smooth their correlation across steps as state)."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay < 1:
        raise ConfigError(f"correlation_ema must be a decay in (0, 1), got {decay!r}")
    if "correlation_ema" not in spec.options:
        takers = [n for n in available_estimators() if "correlation_ema" in get_estimator(n).options]
        raise ConfigError(f"correlation_ema needs estimator {' or '.join(takers)}, not {spec.name!r}")
    if options.get("correlation_ema", decay) != decay:
        raise ConfigError(
            f"correlation_ema={decay!r} contradicts estimator_options correlation_ema={options['correlation_ema']!r}: set one"
        )
    clash = sorted({"pooling", "correlation"} & set(options))
    if clash:
        raise ConfigError(f"correlation_ema sets {clash} itself (pooling='batch' with the smoothed matrix): remove them")
    return {**options, "correlation_ema": decay}


def unused_weight_problem(
    values: Sequence[float], unused: Sequence[int], estimator: str, hint: str, where: str = ""
) -> str | None:
    """The message when a weight the estimator does not use (columns ``unused``) is neither 1
    (the default) nor 0, else ``None``: a weight is never silently dropped. ``where``: the
    setting that holds the weights."""
    bad = [j for j in unused if values[j] not in (0.0, 1.0)]
    if not bad:
        return None
    return (
        f"{estimator} does not use the weights of component(s) {bad} (weights {[values[j] for j in bad]}): "
        f"set them to 1 (or 0){' in ' + where if where else ''}; {hint}"
    )


def _check_weights(spec: Estimator, weights: Any, k: int | None, host: Host) -> tuple[float, ...] | None:
    if weights is None:
        return None
    where = f"{host.weights_from}: " if host.weights_from else ""
    try:
        values = tuple(float(w) for w in (weights.tolist() if hasattr(weights, "tolist") else weights))
    except (TypeError, ValueError):
        raise ConfigError(f"{where}weights must be numbers, got {weights!r}") from None
    if k is not None and len(values) != k:
        raise ConfigError(f"{where}{len(values)} weights for {k} reward components")
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{where}weights must be finite, got {list(values)}")
    if not spec.uses_weights:
        problem = unused_weight_problem(
            values, range(len(values)), host.named(spec.name), "its advantage does not use weights", host.weights_from
        )
        if problem:
            raise ConfigError(problem)
    return values


def _check_state_data(spec: Estimator, state: Any, source: str, host: Host) -> None:
    if state is None:
        return
    if not spec.stateful:
        raise ConfigError(f"{source}: estimator {host.named(spec.name)} carries no state; start without one")
    if not isinstance(state, dict):
        raise ConfigError(f"{source}: an estimator state must be a mapping, got {type(state).__name__}")
    try:
        json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: the estimator state is not plain JSON data ({error})") from None


#: The dry step's batch: two groups of three rollouts, each component's values at these
#: fractions of its range (varying within each group, different across components).
_PROBE = ((0.0, 1.0), (1.0, 0.0), (0.25, 0.5), (1.0, 1.0), (0.5, 0.0), (0.0, 0.5))


def _dry_step(binding: Binding, label: str) -> None:
    """Run the bound estimator once on a small synthetic batch (module docstring, step 7)."""
    import torch

    spec = binding.spec
    options = binding.call_options()
    k = binding.num_components
    if k is None:  # partial: a K the options imply, else 2
        sized = [options.get(key) for key in ("reward_ranges", "correlation") if options.get(key) is not None]
        k = len(sized[0]) if sized and isinstance(sized[0], (list, tuple)) else 2
        if any(isinstance(v, str) for role in spec.roles for v in _listed(options.get(role))):
            return  # roles named before the names are known: checked once they are
        if spec.needs_ranges and options.get("reward_ranges") is None:
            options["reward_ranges"] = [(0.0, 1.0)] * k
        k = max([k] + [i + 1 for role in spec.roles for i in _listed(options.get(role)) if isinstance(i, int)])
    if k == 0:
        return
    ranges = options.get("reward_ranges") or binding.ranges or [(0.0, 1.0)] * k
    try:
        bounds = [(float(lo), float(hi)) for lo, hi in ranges]
    except (TypeError, ValueError):
        bounds = [(0.0, 1.0)] * k
    if len(bounds) != k:
        bounds = [(0.0, 1.0)] * k
    rewards = torch.tensor(
        [[lo + row[j % 2] * (hi - lo) for j, (lo, hi) in enumerate(bounds)] for row in _PROBE], dtype=torch.float64
    )
    weights = binding.estimator_weights
    if weights is not None and len(weights) != k:
        weights = None
    try:
        compute_advantages_with_state(
            rewards, [0, 0, 0, 1, 1, 1], spec.name, weights, state=binding.initial_state() if spec.stateful else None,
            **options,
        )
    except InputError:
        return  # a data problem of the synthetic batch itself, not of the run's settings
    except ConfigError as error:
        raise ConfigError(f"{label}{error}") from None
    except (ValueError, TypeError) as error:  # a user estimator's own check of its options
        raise ConfigError(f"{label}{host_word(binding)}: {error}") from None


def host_word(binding: Binding) -> str:
    return binding.host.named(binding.name)


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


__all__ = ["Binding", "Host", "apply_host", "bind", "unused_weight_problem", "with_correlation_ema"]
