"""The ``algorithm.mrgrpo`` block of a verl config, typed and validated once (a pydantic dataclass).

verl hands every advantage estimator its ``algorithm`` config (a ``DictConfig``). Our estimators
read one optional sub-block, ``algorithm.mrgrpo``; every field is documented here and nowhere else::

    algorithm:
      adv_estimator: mrgrpo_gdpo
      mrgrpo:
        components: [correctness, format, length]   # keys of compute_score's dict
        weights: [1.0, 0.5, 0.5]
        options: {}                                  # the estimator's own options
        normalization: rollout                       # or "token" (verl's GDPO whitening)
        singleton_groups: zero                       # or "score" (verl's value for a group of one)
        eps: 1.0e-6                                  # verl's epsilon; null = mrgrpo's default
        suite: null                                  # e.g. "math": components/weights/ranges from it
        suite_options: {}
        import: []                                   # your modules that @mrgrpo.register_estimator
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, ValidationError, field_validator, model_validator
from pydantic.dataclasses import dataclass

from mrgrpo.errors import ConfigError

NORMALIZATIONS = ("rollout", "token")
SINGLETON_GROUPS = ("zero", "score")
VERL_EPS = 1e-6  # verl's ``epsilon`` default in compute_grpo_outcome_advantage / gdpo
#: Config keys that are not the field's name (``import`` is a Python keyword).
KEYS = {"imports": "import"}
FIELDS = {v: k for k, v in KEYS.items()}


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class MrgrpoVerlConfig:
    """Settings of mrgrpo estimators inside verl (``algorithm.mrgrpo``).

    Attributes:
        components: ``non_tensor_batch`` keys holding one score per rollout each, i.e. keys of the
            dict that ``compute_score`` returns (verl's reward manager copies them into
            ``reward_extra_info``). ``None``: the suite's names if ``suite`` is set, else verl's
            ``algorithm.gdpo_reward_keys``, else the scalar score (``token_level_rewards``
            summed over tokens) as the only component (K = 1).
        weights: one per component; ``None``: the suite's weights, else verl's
            ``algorithm.gdpo_reward_weights``, else all 1.
        options: the estimator's options (``mrgrpo.get_estimator(name).options``); unknown
            names raise before any math runs.
        normalization: ``"rollout"`` (default): the estimator as defined in mrgrpo; a final batch
            normalization (gdpo, sa_mrpo) is over rollouts, as TRL does. ``"token"``: that
            normalization is replaced by verl's ``masked_whiten`` over all response tokens
            (verl's GDPO convention: longer responses weigh more); only for estimators with a
            ``batch_norm`` option.
        singleton_groups: what a prompt with a single scored rollout (a group of one) gets.
            ``"zero"`` (default, mrgrpo's convention): advantage 0, no signal without a peer.
            ``"score"`` (verl's ``grpo``/``gdpo`` convention, mean 0 and std 1 for a group of
            one): its weighted score ``Σ_k w_k r_k / (1 + eps)`` (without ``/(1 + eps)`` for
            unscaled estimators: ``dr_grpo``, ``grpo`` with ``scale="none"``), before any token
            whitening. This matters beyond that row: with ``normalization="token"`` the
            whitening mean and std are taken over every response token of the batch, so zero and
            the raw score give every other row a different advantage too. Set ``"score"`` to
            reproduce verl's ``gdpo`` exactly on batches with groups of one. With
            ``normalization="rollout"`` it is refused for estimators whose own final batch
            normalization would mix it in (``batch_norm`` option: gdpo, sa_mrpo).
        eps: applied as the estimator's ``eps`` option when it has one and ``options`` does not
            set it. Default 1e-6 is verl's epsilon (mrgrpo's own default, 1e-4, is TRL's);
            ``None`` keeps mrgrpo's default.
        suite: an mrgrpo reward suite name (``math``, ``tool_call``, ``code``, ...) supplying
            defaults for components, weights and (for sa_mrpo) ``reward_ranges``; use the same
            suite in ``mrgrpo.integrations.verl_reward``.
        suite_options: keyword arguments of the suite factory.
        imports: (key ``import`` in the config) modules to import before the estimator is
            looked up, e.g. ``[my_estimators]`` where you ``@mrgrpo.register_estimator`` your
            own: the launcher imports them (and checks the estimator's options) before Ray
            starts and lists them in every Ray worker's ``VERL_USE_EXTERNAL_MODULES``; the
            trainer process imports them again before its first advantage computation.
    """

    components: tuple[str, ...] | None = None
    weights: tuple[float, ...] | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    normalization: str = "rollout"
    singleton_groups: str = "zero"
    eps: float | None = VERL_EPS
    suite: str | None = None
    suite_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    imports: tuple[str, ...] = ()

    # A pydantic dataclass: the types are checked (and lists read as tuples, numbers as floats)
    # after the "before" checks below, which keep the messages the config's own words.

    @field_validator("components", "weights", mode="before")
    @classmethod
    def _a_list(cls, value: Any, info: Any) -> Any:
        if value is not None and (isinstance(value, str | bytes) or not isinstance(value, list | tuple)):
            raise ConfigError(f"algorithm.mrgrpo.{info.field_name} must be a list, got {value!r}")
        return value

    @field_validator("components", mode="before")
    @classmethod
    def _key_names(cls, value: Any) -> Any:
        if value is not None:
            if not value or not all(isinstance(c, str) and c for c in value):
                raise ConfigError(f"algorithm.mrgrpo.components must be a non-empty list of key names, got {tuple(value)!r}")
            if len(set(value)) != len(value):
                raise ConfigError(f"algorithm.mrgrpo.components has duplicates: {list(value)}")
        return value

    @field_validator("options", "suite_options", mode="before")
    @classmethod
    def _a_mapping(cls, value: Any, info: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"algorithm.mrgrpo.{info.field_name} must be a mapping, got {value!r}")
        return dict(value)

    @field_validator("imports", mode="before")
    @classmethod
    def _module_names(cls, value: Any) -> Any:
        if value is None:
            return ()
        modules = [value] if isinstance(value, str) else value
        if not isinstance(modules, list | tuple) or not all(isinstance(m, str) and m for m in modules):
            shown = list(modules) if isinstance(modules, list | tuple) else modules
            raise ConfigError(f"algorithm.mrgrpo.import must be a list of module names, got {shown!r}")
        return tuple(modules)

    @field_validator("normalization", "singleton_groups")
    @classmethod
    def _a_choice(cls, value: str, info: Any) -> str:
        choices = {"normalization": NORMALIZATIONS, "singleton_groups": SINGLETON_GROUPS}[info.field_name]
        if value not in choices:
            raise ConfigError(f"algorithm.mrgrpo.{info.field_name} must be one of {choices}, got {value!r}")
        return value

    @field_validator("eps")
    @classmethod
    def _eps(cls, value: float | None) -> float | None:
        if value is not None and not (value >= 0):
            raise ConfigError(f"algorithm.mrgrpo.eps must be >= 0 or null, got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_weight_per_component(self) -> MrgrpoVerlConfig:
        if self.weights is not None and self.components is not None and len(self.weights) != len(self.components):
            raise ConfigError(
                f"algorithm.mrgrpo.weights has {len(self.weights)} entries for {len(self.components)} "
                f"components {list(self.components)}"
            )
        return self

    @classmethod
    def of(cls, **values: Any) -> MrgrpoVerlConfig:
        """The settings of keyword ``values`` (field names), or one-line :class:`ConfigError`."""
        try:
            return cls(**values)
        except ValidationError as error:
            raise ConfigError(_one_line(error)) from None

    @classmethod
    def from_algorithm_config(cls, algorithm: Any) -> MrgrpoVerlConfig:
        """Read ``algorithm.mrgrpo`` (plus verl's ``gdpo_reward_keys`` / ``gdpo_reward_weights``
        as fallbacks) from verl's algorithm config: a ``DictConfig``, ``AlgoConfig``, dict or None."""
        if algorithm is None:
            return cls()
        block = _plain(_get(algorithm, "mrgrpo")) or {}
        if not isinstance(block, Mapping):
            raise ConfigError(f"algorithm.mrgrpo must be a mapping, got {type(block).__name__}")
        known = {KEYS.get(f.name, f.name) for f in dataclasses.fields(cls)}
        unknown = sorted(set(block) - known)
        if unknown:
            raise ConfigError(f"algorithm.mrgrpo has unknown key(s) {unknown}; known keys: {sorted(known)}")
        values = {FIELDS.get(k, k): v for k, v in block.items()}
        if values.get("components") is None and values.get("suite") is None:
            values["components"] = _plain(_get(algorithm, "gdpo_reward_keys"))
            if values.get("weights") is None:
                values["weights"] = _plain(_get(algorithm, "gdpo_reward_weights"))
        return cls.of(**values)


def _one_line(error: ValidationError) -> str:
    """The messages of a validation error, one line: a check's own words, else ``key: problem, got value``."""
    problems = []
    for item in error.errors():
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):
            problems.append(str(cause))
            continue
        field, *rest = [str(p) for p in item["loc"]] or ["(top level)"]
        where = ".".join([KEYS.get(field, field), *rest])
        message = "unknown key" if item["type"] == "unexpected_keyword_argument" else item["msg"]
        shown = repr(item.get("input"))
        problems.append(f"algorithm.mrgrpo.{where}: {message[:1].lower() + message[1:]}, got {shown[:60]}")
    return "; ".join(problems)


def _get(config: Any, key: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(key)
    getter = getattr(config, "get", None)  # DictConfig and verl's BaseConfig dataclasses
    if callable(getter):
        return getter(key, None)
    return getattr(config, key, None)


def _plain(value: Any) -> Any:
    """OmegaConf containers -> plain Python (lists, dicts); everything else unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        return value
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value
