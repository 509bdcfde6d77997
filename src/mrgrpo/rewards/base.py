"""Reward components and suites.

A :class:`RewardComponent` is one named, range-checked, TRL-compatible reward function:
``fn(prompts, completions, **columns) -> list[float | None]`` (``None`` = not scored, which
becomes NaN in the reward matrix the estimators read). A :class:`RewardSuite` is an ordered
set of components with default weights; its ``reward_ranges`` feed ``sa_mrpo``.

Suites are registered by name (:func:`register_suite`), each declaring the dataset columns its
components read and the suites it forwards options to; :func:`suite_info` is how other layers
(tasks, the train job, verl's reward function) learn what a suite needs and takes.

Completions may be plain strings or conversational (a list of ``{"role", "content"}``
messages, as TRL passes for chat datasets); :func:`completion_text` normalizes both.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mrgrpo.errors import ConfigError, InputError, UnknownNameError

RewardFn = Callable[..., list[float | None]]


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, or the concatenated content of chat messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        return "".join(completion_text(message) for message in completion)
    raise TypeError(f"cannot read text from a completion of type {type(completion).__name__}")


@dataclass(frozen=True)
class RewardComponent:
    """One reward component.

    Attributes:
        name: unique within a suite; becomes the reward function's ``__name__`` (TRL logs it).
        range: declared ``(lo, hi)``; every value returned must lie inside it (a value outside
            is a bug in the component and raises ``ValueError`` naming it).
        fn: ``(prompts, completions, **columns) -> list[float | None]``.
        sparse: the component leaves whole rows unscored by design, not by a missing input (code
            ``efficiency``: unscored where the reference is too fast to time soundly), so the
            pre-training check does not require it to score the first sample rows.
    """

    name: str
    range: tuple[float, float]
    fn: RewardFn
    sparse: bool = False

    def __post_init__(self) -> None:
        lo, hi = self.range
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise ConfigError(
                f"reward component {self.name!r}: range must be finite (lo, hi) with hi > lo, got {self.range}"
            )

    @property
    def __name__(self) -> str:  # TRL names reward columns after the callable's __name__
        return self.name

    def __call__(self, prompts: list, completions: list, **columns: Any) -> list[float | None]:
        values = self.fn(prompts, completions, **columns)
        if len(values) != len(completions):
            raise InputError(
                f"reward component {self.name!r} returned {len(values)} values for {len(completions)} completions"
            )
        lo, hi = self.range
        out: list[float | None] = []
        for i, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            value = float(value)
            if math.isnan(value):
                out.append(None)
                continue
            if not (lo <= value <= hi):
                raise InputError(
                    f"reward component {self.name!r} returned {value} for completion {i}, outside its "
                    f"declared range [{lo}, {hi}]: fix the component or widen its range"
                )
            out.append(value)
        return out


@dataclass(frozen=True)
class RewardSuite:
    """An ordered set of reward components with default weights."""

    name: str
    components: tuple[RewardComponent, ...]
    weights: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.components:
            raise ConfigError(f"reward suite {self.name!r} has no components")
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise ConfigError(f"reward suite {self.name!r} has duplicate component names: {names}")
        if not self.weights:
            object.__setattr__(self, "weights", tuple(1.0 for _ in self.components))
        if len(self.weights) != len(self.components):
            raise ConfigError(
                f"reward suite {self.name!r}: {len(self.weights)} weights for {len(self.components)} components"
            )

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.components]

    @property
    def reward_ranges(self) -> list[tuple[float, float]]:
        return [c.range for c in self.components]

    def select(self, names: Sequence[str], weights: Sequence[float] | None = None) -> RewardSuite:
        """A suite with only ``names`` (in that order), optionally re-weighted."""
        by_name = {c.name: (c, w) for c, w in zip(self.components, self.weights)}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ConfigError(f"suite {self.name!r} has no component(s) {unknown}; it has {self.names}")
        chosen = [by_name[n] for n in names]
        new_weights = tuple(weights) if weights is not None else tuple(w for _, w in chosen)
        return RewardSuite(self.name, tuple(c for c, _ in chosen), new_weights)

    def with_weights(self, weights: dict[str, float] | Sequence[float]) -> RewardSuite:
        """Same components, new weights (a full list, or a mapping name -> weight for some)."""
        if isinstance(weights, dict):
            unknown = [n for n in weights if n not in self.names]
            if unknown:
                raise ConfigError(f"suite {self.name!r} has no component(s) {unknown}; it has {self.names}")
            new = tuple(float(weights.get(n, w)) for n, w in zip(self.names, self.weights))
        else:
            new = tuple(float(w) for w in weights)
        return RewardSuite(self.name, self.components, new)


def conditioned(
    component: RewardComponent,
    on: RewardComponent,
    threshold: float,
    name: str | None = None,
) -> RewardComponent:
    """GDPO's conditioned reward: ``component`` is granted only where ``on`` reaches ``threshold``.

    Where the condition fails the value is the component's lower bound (not ``None``: the
    rollout *was* scored, it just earned nothing). Where either is unscored, ``None``.
    """

    def fn(prompts: list, completions: list, **columns: Any) -> list[float | None]:
        gate = on(prompts, completions, **columns)
        values = component(prompts, completions, **columns)
        lo = component.range[0]
        return [
            None if (g is None or v is None) else (v if g >= threshold else lo)
            for g, v in zip(gate, values)
        ]

    return RewardComponent(name or f"{component.name}_if_{on.name}", component.range, fn)


@dataclass(frozen=True)
class SuiteInfo:
    """What a registered suite declares (:func:`register_suite`) and what its factory takes.

    Attributes:
        name: the registered name.
        factory: ``(**options) -> RewardSuite``.
        columns: the dataset columns its components read (``answer``, ``test``, ...); a task
            pairs with the suite only if its rows provide them.
        forwards: the suites whose factory options this one passes on through ``**options``
            (``code_sa_mrpo`` forwards to ``code``): their options count as its own.
    """

    name: str
    factory: Callable[..., RewardSuite]
    columns: tuple[str, ...] = ()
    forwards: tuple[str, ...] = ()

    def _parameters(self) -> list[inspect.Parameter]:
        return list(inspect.signature(self.factory).parameters.values())

    @property
    def takes_tokenizer(self) -> bool:
        """Whether the factory takes the policy's ``tokenizer`` (to count tokens)."""
        return any(p.name == "tokenizer" for p in self._parameters())

    @property
    def option_names(self) -> tuple[str, ...]:
        """The options the factory takes by name, then those of the suites it forwards to."""
        own = [p.name for p in self._parameters() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        forwarded = [n for suite in self.forwards for n in suite_info(suite).option_names]
        return tuple(dict.fromkeys(own + forwarded))

    @property
    def open_ended(self) -> bool:
        """Whether any option name is accepted: the factory takes ``**options`` and forwards them
        to no declared suite (or to one that is itself open-ended)."""
        if self.forwards:
            return any(suite_info(suite).open_ended for suite in self.forwards)
        return any(p.kind is p.VAR_KEYWORD for p in self._parameters())


_SUITES: dict[str, Callable[..., RewardSuite]] = {}  # name -> factory
_DECLARED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # name -> (columns, forwards)


def register_suite(
    name: str, columns: Sequence[str] = (), forwards: Sequence[str] = ()
) -> Callable[[Callable[..., RewardSuite]], Callable[..., RewardSuite]]:
    """Register a suite factory ``(**options) -> RewardSuite`` under ``name``.

    ``columns``: the dataset columns its components read; ``forwards``: the suites it passes
    ``**options`` on to (see :class:`SuiteInfo`)."""

    def decorator(factory: Callable[..., RewardSuite]) -> Callable[..., RewardSuite]:
        if name in _SUITES and _SUITES[name] is not factory:
            raise ConfigError(f"a reward suite named {name!r} is already registered")
        _SUITES[name] = factory
        _DECLARED[name] = (tuple(columns), tuple(forwards))
        return factory

    return decorator


def suite_info(name: str, where: str = "") -> SuiteInfo:
    """What suite ``name`` declares; :class:`~mrgrpo.errors.UnknownNameError` (``where`` first) if
    no suite has that name."""
    _import_builtin_suites()
    if name not in _SUITES:
        raise UnknownNameError("reward suite", name, sorted(_SUITES), where=where)
    columns, forwards = _DECLARED.get(name, ((), ()))
    return SuiteInfo(name, _SUITES[name], columns, forwards)


def get_suite(name: str, **options: Any) -> RewardSuite:
    """Build the suite registered under ``name`` (see :func:`available_suites`)."""
    return suite_info(name).factory(**options)


def available_suites() -> list[str]:
    _import_builtin_suites()
    return sorted(_SUITES)


def suites_with_option(option: str) -> list[str]:
    """The registered suites that take ``option`` (to say where a misplaced option belongs)."""
    return [name for name in available_suites() if option in suite_info(name).option_names]


def _import_builtin_suites() -> None:
    # Suites register themselves on import; import lazily so `mrgrpo.rewards` stays light.
    import importlib

    for module in ("code", "math", "tool_call", "agent", "scaled"):
        try:
            importlib.import_module(f"mrgrpo.rewards.{module}")
        except ModuleNotFoundError as error:
            if error.name != f"mrgrpo.rewards.{module}":
                raise
