"""The typed, validated configuration of a training run (``mrgrpo train``).

One YAML file (or the embedded default, :data:`mrgrpo.train.defaults.DEFAULT_CONFIG`) maps
onto :class:`TrainConfig`. Unknown keys are errors, at every level, including the ``trainer``
section, whose keys must be fields of TRL's ``GRPOConfig`` (they are passed through unchanged,
so vLLM, multi-GPU and DeepSpeed settings work exactly as in TRL).

Example::

    model: smollm2                   # preset (tiny | smollm2) or a local/hub path
    task: {name: chain_sum, options: {min_terms: 2, max_terms: 2}}
    rewards: {suite: math, weights: {correctness: 1.0, format: 0.5, length: 0.5}}
    estimator: corr_grpo
    estimator_options: {}
    max_steps: 40
    max_wall_seconds: 540
    trainer: {learning_rate: 1.0e-5, num_generations: 4, per_device_train_batch_size: 8}
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from mrgrpo.errors import ConfigError
from mrgrpo.keyvalue import parse_assignment, yaml_problem
from mrgrpo.keyvalue import parse_value as parse_value  # the reader of one ``--set`` value
from mrgrpo.train.precision import AUTO
from mrgrpo.yaml_numbers import load_yaml

# GRPOConfig fields mrgrpo sets itself from the top level of the config (one source of truth).
RESERVED_TRAINER_KEYS = {
    "output_dir": "use `--out DIR` (the run directory)",
    "max_steps": "use the top-level `max_steps`",
    "save_steps": "use the top-level `save_steps`",
    "seed": "use the top-level `seed`",
    "reward_weights": "use `rewards.weights`",
    "multi_objective_aggregation": "advantages come from `estimator` (gdpo = normalize_then_sum)",
    "scale_rewards": "advantages come from `estimator` (e.g. `estimator_options: {scale: batch}` for grpo)",
    "resume_from_checkpoint": "use `mrgrpo train --resume RUN_DIR`",
}


#: ``diagnostics_every`` by default: one ``mrgrpo.diagnose`` call costs about 1 ms, 1-2% of a
#: tiny-preset step when run every step; every 10 steps keeps mrgrpo's share of a step under 1%
#: (docs/benchmarks.md) and still gives a correlation matrix at the start and the end of a run.
DEFAULT_DIAGNOSTICS_EVERY = 10


class StrictConfig(BaseModel):
    """The base of mrgrpo's typed configs (a run's, a comparison's ``experiment``): unknown keys
    are errors; strict, so no guessing between types (``max_steps: true`` is not 1, ``size: "8"``
    is not 8; an int is still accepted where a float is expected); NaN and ±inf are refused;
    assignments are validated too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True, allow_inf_nan=False)


class TaskConfig(StrictConfig):
    """Where prompts come from.

    ``name`` is any reasoning-gym dataset name (``chain_sum``, ``basic_arithmetic``,
    ``gsm_symbolic``, ...), built with ``options`` as its keyword arguments. Train prompts,
    eval prompts and few-shot examples are distinct questions (see
    :func:`mrgrpo.data.reasoning_tasks.load_reasoning_gym`).
    """

    name: str = "chain_sum"
    options: dict[str, Any] = Field(default_factory=dict)
    size: int = Field(150, gt=0, description="number of training prompts")
    eval_size: int = Field(40, ge=0, description="number of held-out prompts (`mrgrpo eval`)")
    seed: int = 0
    system_prompt: str | None = Field(
        None, description="system line; null: the math suite's instruction; empty: no system message"
    )
    few_shot: int = Field(1, ge=0, le=4, description="worked example exchanges put before each prompt")


class RewardsConfig(StrictConfig):
    """The reward suite: a registered suite name, its factory options, which components (in
    order; default all) and their weights (a mapping for some, default the suite's)."""

    suite: str = "math"
    options: dict[str, Any] = Field(default_factory=dict)
    components: list[str] | None = None
    weights: dict[str, float] | None = None


class TrainConfig(StrictConfig):
    """A full training run. ``trainer`` holds GRPOConfig fields, passed through."""

    model: str = Field("smollm2", description="preset (tiny | smollm2) or local/hub path")
    model_kwargs: dict[str, Any] = Field(default_factory=dict, description="from_pretrained kwargs")
    task: TaskConfig = Field(default_factory=TaskConfig)
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    estimator: str = "corr_grpo"
    estimator_options: dict[str, Any] = Field(default_factory=dict)
    correlation_ema: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="corr_grpo/sa_corr_grpo: smooth the batch-pooled correlation across steps with this "
        "EMA decay (the state is checkpointed and restored on --resume)",
    )
    diagnostics_every: int = Field(
        DEFAULT_DIAGNOSTICS_EVERY,
        ge=1,
        description="run mrgrpo.diagnose (diagnostics.jsonl, mrgrpo/diag/* metrics) every N training steps "
        "(the first step included; 1 = every step); the reward and advantage metrics are logged every step",
    )
    max_steps: int = Field(40, gt=0)
    max_wall_seconds: float | None = Field(
        None, gt=0, description="stop (and save) before this many seconds since the job started"
    )
    save_steps: int = Field(10, gt=0, description="checkpoint every N steps (and at the end)")
    seed: int = 0
    share_prompt: bool = Field(
        False,
        description="compute each group's prompt once in the loss's forward (rollouts of one prompt in one "
        "micro-batch: per_device_train_batch_size >= num_generations); needs trainer.gradient_checkpointing off",
    )
    malloc_mmap_threshold_kib: int | None = Field(
        None,
        ge=4,
        le=32768,
        description="Linux/glibc: allocations of at least this many KiB are mmapped and returned to the system "
        "when freed (glibc's mmap threshold, fixed: mrgrpo.train.memory), so a CPU run's RSS follows its live "
        "tensors instead of ratcheting up; None keeps glibc's default (the demo sets 256)",
    )
    trainer: dict[str, Any] = Field(
        default_factory=dict,
        description="GRPOConfig fields, passed through; bf16 may also be auto (the default: bfloat16 only where "
        "the GPU or CPU computes it natively, mrgrpo.train.precision)",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, name: str) -> str:
        from mrgrpo.train.presets import check_model_name, check_trainable_source

        check_model_name(name)
        check_trainable_source(name)  # quantized weights: refused before any data is prepared
        return name

    @field_validator("estimator")
    @classmethod
    def _known_estimator(cls, name: str) -> str:
        from mrgrpo.estimators import available_estimators

        if name not in available_estimators():
            raise ValueError(f"unknown estimator {name!r}; available: {', '.join(available_estimators())}")
        return name

    @field_validator("trainer")
    @classmethod
    def _grpo_fields(cls, trainer: dict[str, Any]) -> dict[str, Any]:
        from trl import GRPOConfig

        known = {f.name for f in dataclasses.fields(GRPOConfig)}
        problems = []
        for key, value in trainer.items():
            if key in RESERVED_TRAINER_KEYS:
                problems.append(f"trainer.{key} is set by mrgrpo: {RESERVED_TRAINER_KEYS[key]}")
            elif key not in known:
                close = _close_matches(key, known)
                problems.append(f"trainer.{key} is not a GRPOConfig field" + (f" (did you mean {close}?)" if close else ""))
            elif key == "bf16" and value == AUTO:
                continue  # resolved per machine when the run starts (mrgrpo.train.precision)
            else:
                problem = _trainer_type_problem(key, value)
                if problem:
                    problems.append(problem)
        if problems:
            raise ValueError("; ".join(problems))
        return trainer

    @model_validator(mode="after")
    def _share_prompt_without_checkpointing(self) -> TrainConfig:
        if self.share_prompt and self.trainer.get("gradient_checkpointing"):
            raise ValueError(
                "share_prompt needs trainer.gradient_checkpointing off (a recomputed layer would re-run the shared "
                "prompt's cache): set one of them to false"
            )
        return self

    @model_validator(mode="after")
    def _estimator_options(self) -> TrainConfig:
        from mrgrpo.estimators.binding import bind

        # names and values, without data (a partial binding); the run binds the estimator to the
        # suite's components, ranges and weights before any model loads (mrgrpo.train.job.bind_run)
        try:
            bind(self.estimator, self.estimator_options, correlation_ema=self.correlation_ema, partial=True)
        except ValueError as error:
            raise ValueError(f"estimator_options: {error}") from None
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


@functools.lru_cache(maxsize=None)
def _trainer_field_adapter(key: str) -> TypeAdapter | None:
    import typing

    from trl import GRPOConfig

    try:
        return TypeAdapter(typing.get_type_hints(GRPOConfig)[key])
    except Exception:  # noqa: BLE001 - an annotation pydantic cannot express: TRL checks it
        return None


def _trainer_type_problem(key: str, value: Any) -> str | None:
    """A one-line message when ``trainer.<key>`` has the wrong type for its GRPOConfig field
    (checked strictly: ``"eight"``, ``"8"`` and ``true`` are not batch sizes), else ``None``."""
    if isinstance(value, float) and math.isnan(value):
        return f"trainer.{key} is NaN; give a number"
    adapter = _trainer_field_adapter(key)
    if adapter is None:
        return None
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError:
        try:
            adapter.validate_python(value, strict=False)
        except ValidationError as error:
            expected = error.errors()[0]["msg"]
            expected = expected[:1].lower() + expected[1:]
        else:
            expected = f"expected {_type_word(adapter)}"
        hint = ""
        if isinstance(value, str) and isinstance(load_yaml(value) if value.strip() else None, (int, float)):
            hint = "; drop the quotes to give a number"
        if key == "bf16":
            expected = "expected auto, true or false"
        return f"trainer.{key}: {expected}, got {value!r} ({type(value).__name__}){hint}"
    return None


def _type_word(adapter: TypeAdapter) -> str:
    schema = adapter.core_schema
    while schema.get("type") in ("nullable", "default"):
        schema = schema["schema"]
    return {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string"}.get(
        str(schema.get("type")), "a value of the field's type"
    )


def _close_matches(key: str, known: set[str]) -> str:
    import difflib

    return ", ".join(difflib.get_close_matches(key, sorted(known), n=3))


def _format_validation_error(error: ValidationError, source: str) -> str:
    """One line: ``invalid config (SOURCE): key: problem; key: problem``."""
    problems = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif not item["type"].startswith(("value_error", "assertion_error")):
            shown = repr(item.get("input"))
            message += f", got {shown if len(shown) <= 60 else shown[:57] + '...'}"
        named = where == "(top level)" or message.startswith(f"{where}.")
        problems.append(message if named else f"{where}: {message}")
    return f"invalid config ({source}): " + "; ".join(problems)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``key.sub=value`` assignments (read by :func:`mrgrpo.keyvalue.parse_assignment`: YAML 1.2
    values) applied to a raw config mapping (a copy)."""
    data = copy.deepcopy(data)
    for item in overrides:
        key, value = parse_assignment(item, "--set", dotted=True, example="trainer.learning_rate=1e-5")
        parts = [part.strip() for part in key.split(".")]
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a mapping")
            node = child
        node[parts[-1]] = value
    return data


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    estimator: str | None = None,
) -> TrainConfig:
    """The validated config: ``path`` (YAML; default the embedded demo), then ``--estimator``,
    then ``--set`` overrides. Raises :class:`ConfigError` with one line per problem."""
    data, source = read_config_mapping(path)
    if estimator is not None:
        data["estimator"] = estimator
    data = apply_overrides(data, overrides or [])
    return validate_config(data, source)


def read_config_mapping(path: str | Path | None) -> tuple[dict[str, Any], str]:
    """The raw mapping of a YAML config file (default: a copy of the embedded demo config; a name
    that is no file: the shipped config of that name, :mod:`mrgrpo.train.shipped`) and a name for
    it in messages. Raises :class:`ConfigError` for a missing file, bad YAML or a
    non-mapping."""
    from mrgrpo.train.defaults import DEFAULT_CONFIG

    from mrgrpo.train.shipped import resolve

    if path is None:
        return copy.deepcopy(DEFAULT_CONFIG), "embedded default"
    file, source = resolve(path)  # a file, else a shipped config of that name (mrgrpo configs list)
    try:
        data = load_yaml(file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory; pass a YAML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path} is not valid YAML: {yaml_problem(error)}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping, got {type(data).__name__}")
    return data, source


def _non_finite(data: Any, prefix: str = "") -> list[str]:
    """Dotted keys holding NaN or ±inf anywhere (free-form sections included)."""
    if isinstance(data, dict):
        return [k for key, value in data.items() for k in _non_finite(value, f"{prefix}{key}.")]
    if isinstance(data, (list, tuple)):
        return [k for i, value in enumerate(data) for k in _non_finite(value, f"{prefix}{i}.")]
    return [prefix.rstrip(".")] if isinstance(data, float) and not math.isfinite(data) else []


def validate_config(data: dict[str, Any], source: str = "config") -> TrainConfig:
    """The :class:`TrainConfig` of a raw mapping; :class:`ConfigError` (one line) if invalid."""
    bad = _non_finite(data)
    if bad:  # a config has no use for them, and config.yaml could not record them faithfully
        raise ConfigError(
            f"invalid config ({source}): {', '.join(bad)}: NaN/infinity is not a valid setting; give a finite "
            "number (null where a limit is optional)"
        )
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error, source)) from None
