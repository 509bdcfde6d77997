"""A run's task, reward suite and data, checked before any model is loaded.

:func:`prepare` is what ``mrgrpo train`` (and ``compare``, ``eval``) do first, with only the
policy's tokenizer at hand:

1. resolve the task (:func:`mrgrpo.tasks.registry.resolve`) and its options (an option of
   another task, or a preset's leftover, is an error);
2. check the suite's options (an option of another suite, e.g. the math preset's
   ``length_thresholds`` under ``suite: code``, is an error naming the suite it belongs to);
3. check that the task provides every column the suite reads (error naming both);
4. build the suite and the task's rows, and score a few sample rows (their reference completions)
   with every component: a component that scores none of them would train with zero signal.

Each failure is one :class:`~mrgrpo.errors.ConfigError` line. The prompt-length rule needs the
model's context and is applied once the model is loaded (:func:`fit_prompts`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.tasks.base import PromptFit, Task, TaskSpec
from mrgrpo.tasks.checks import check_columns, check_scorable, check_suite_options, suite_factory
from mrgrpo.tasks.registry import resolve


@dataclass
class Prepared:
    """The checked task of a run: the task, its spec and resolved options, the suite, the rows."""

    task: Task
    spec: TaskSpec
    options: dict[str, Any]
    suite: Any
    dataset: Any
    sample_means: dict[str, float]
    chat: bool = True
    fit: PromptFit | None = None
    #: The registered name the suite was built from (what a config must name to rebuild it; a
    #: suite's own ``name`` may describe it differently, e.g. which base suite it rescales).
    suite_name: str = ""
    #: The policy's tokenizer the rows were measured with (the train job hands it to the model
    #: loader, so a run reads its tokenizer once).
    tokenizer: Any = None


def suite_settings(task: Task, options: Mapping[str, Any], rewards: Any) -> tuple[str, dict[str, Any]]:
    """``(suite name, suite options)``: ``rewards.suite`` (default: the task's), with the task's
    defaults for its own suite under ``rewards.options``."""
    explicit = "suite" in getattr(rewards, "model_fields_set", {"suite"})  # a config that names no suite
    name = (getattr(rewards, "suite", None) if explicit else None) or task.suite
    if not name:
        raise ConfigError(f"task {task.name!r} has no reward suite (evaluation only)")
    given = dict(getattr(rewards, "options", None) or {})
    defaults = task.suite_defaults(options) if name == task.suite else {}
    return name, {**defaults, **given}


def build_suite(
    task: Task,
    options: Mapping[str, Any],
    rewards: Any,
    tokenizer: Any = None,
) -> Any:
    """The reward suite of ``rewards`` (``suite``, ``options``, ``components``, ``weights``) for ``task``."""
    from mrgrpo.rewards import get_suite

    name, suite_options = suite_settings(task, options, rewards)
    check_suite_options(name, suite_options)
    if tokenizer is not None and "tokenizer" in inspect.signature(suite_factory(name)).parameters:
        suite_options.setdefault("tokenizer", tokenizer)
    components: Sequence[str] | None = getattr(rewards, "components", None)
    weights = getattr(rewards, "weights", None)
    if weights is None and name == task.suite and task.weights:
        weights = dict(task.weights)
    try:
        suite = get_suite(name, **suite_options)
        if components is not None:
            suite = suite.select(components)
        if weights is not None:
            suite = suite.with_weights({k: v for k, v in weights.items() if k in suite.names} if components else weights)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"rewards: {error}") from None
    return suite


def prepare(task_config: Any, rewards: Any, tokenizer: Any, chat: bool, split: str = "train", score: bool = True) -> Prepared:
    """Resolve, build and check a run's task and suite (see the module docstring); ``score=False``
    leaves out step 4's scoring of sample rows (``mrgrpo train --check``: it may start sandboxes)."""
    task, spec = resolve(task_config)
    options = task.resolve_options(spec.options)
    name, suite_options = suite_settings(task, options, rewards)
    check_suite_options(name, suite_options)
    check_columns(task, name)
    suite = build_suite(task, options, rewards, tokenizer)
    dataset = task.rows(spec, split, chat)
    means = check_scorable(task, suite, dataset) if score else {}
    return Prepared(task, spec, options, suite, dataset, means, chat, suite_name=name, tokenizer=tokenizer)


def prompt_limit(prepared: Prepared, context: int | None, reserved: int) -> int | None:
    """The longest prompt allowed: ``context − reserved`` (the completion's room) and the task's
    ``max_prompt_length``, whichever is smaller (``None``: no limit known)."""
    limits = [context - reserved] if context else []
    if prepared.options.get("max_prompt_length"):
        limits.append(int(prepared.options["max_prompt_length"]))
    return min(limits) if limits else None


def fit_prompts(prepared: Prepared, tokenizer: Any, chat: bool, context: int | None, reserved: int) -> PromptFit | None:
    """Apply the task's prompt rule to ``prepared.dataset`` (in place); returns what it did."""
    limit = prompt_limit(prepared, context, reserved)
    if limit is None:
        return None
    prepared.dataset, prepared.fit = prepared.task.fit(prepared.dataset, tokenizer, chat, limit, prepared.options)
    return prepared.fit


def model_context(model: Any, tokenizer: Any = None) -> int | None:
    """The policy's context in tokens: its config's ``max_position_embeddings`` (else the tokenizer's
    ``model_max_length`` when that is a real limit)."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    length = getattr(tokenizer, "model_max_length", None)
    return length if isinstance(length, int) and 0 < length < 10**7 else None
