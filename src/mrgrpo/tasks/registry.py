"""The task registry: the only place that maps a task name to its :class:`~mrgrpo.tasks.base.Task`.

``resolve(name)`` accepts a registered name (``math``, ``qa``, ``humaneval``, ``code``, ``bfcl``,
``agentdojo``, ``asb``, or one a user registered with :func:`register_task`) and, as a shorthand
for ``math``, any reasoning-gym dataset name (``chain_sum``, ``gsm_symbolic``, ...): then the
returned options carry ``dataset: <name>``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from mrgrpo.errors import ConfigError, UnknownNameError
from mrgrpo.extras import import_extra
from mrgrpo.rewards.base import suite_info
from mrgrpo.tasks.base import Task, TaskSpec

_TASKS: dict[str, Task] = {}
_BUILTIN = ("math", "code", "tool_call", "agentdojo", "asb")  # modules
_ORDER = ("math", "qa", "humaneval", "code", "bfcl", "agentdojo", "asb")  # how tasks are listed


def register_task(task: Task) -> Task:
    """Register ``task`` under ``task.name`` (a different task under a taken name is an error)."""
    if not task.name:
        raise ConfigError("a task needs a name")
    if task.name in _TASKS and type(_TASKS[task.name]) is not type(task):
        raise ConfigError(f"a task named {task.name!r} is already registered")
    _TASKS[task.name] = task
    return task


def _import_builtins() -> None:
    for module in _BUILTIN:
        importlib.import_module(f"mrgrpo.tasks.{module}")


def available_tasks() -> list[str]:
    """The built-in tasks (in :data:`_ORDER`), then the ones users registered, in registration order."""
    _import_builtins()
    builtin = [n for n in _ORDER if n in _TASKS]
    return builtin + [n for n in _TASKS if n not in builtin]


def get_task(name: str) -> Task:
    """The task registered as ``name`` (no reasoning-gym shorthand; see :func:`resolve`)."""
    _import_builtins()
    if name not in _TASKS:
        raise UnknownNameError("task", name, available_tasks(), "or any reasoning-gym dataset name")
    return _TASKS[name]


def _reasoning_gym_names(name: str) -> set[str]:
    """reasoning-gym's dataset names; :class:`MissingExtraError` (the ``math`` extra) when it is not
    installed, since ``name`` (no registered task) may be one of them."""
    feature = f"task {name!r} is no registered task ({', '.join(available_tasks())}); as a reasoning-gym dataset name it"
    return set(import_extra("reasoning_gym.factory", "math", feature).DATASETS)


def resolve(spec: TaskSpec | Any) -> tuple[Task, TaskSpec]:
    """``(task, spec)`` of a run's ``task:`` section; a reasoning-gym dataset name becomes the ``math``
    task with ``options.dataset`` set. An unknown name is an :class:`~mrgrpo.errors.UnknownNameError`;
    with reasoning-gym not installed, a :class:`~mrgrpo.errors.MissingExtraError` naming the ``math`` extra."""
    spec = TaskSpec.of(spec)
    _import_builtins()
    if spec.name in _TASKS:
        return _TASKS[spec.name], spec
    if spec.name in _reasoning_gym_names(spec.name):
        options = dict(spec.options)
        if options.get("dataset", spec.name) != spec.name:
            raise ConfigError(f"task {spec.name!r} with options.dataset {options['dataset']!r}: name one dataset")
        options["dataset"] = spec.name
        return _TASKS["math"], TaskSpec(
            "math", options, spec.size, spec.eval_size, spec.seed, spec.system_prompt, spec.few_shot
        )
    raise UnknownNameError(
        "task", spec.name, available_tasks(), "or any reasoning-gym dataset name (`mrgrpo tasks` lists them)"
    )


def task_rows(spec: TaskSpec | Any, split: str = "train", chat: bool = True) -> Any:
    """The ``train`` (``size`` rows) or ``eval`` (``eval_size``, the task's test split) rows of a run's
    ``task:`` section (a ``TaskConfig``, a :class:`TaskSpec` or a task name), resolved by :func:`resolve`."""
    task, spec = resolve(spec)
    return task.rows(spec, split, chat)


def tasks_providing(columns: Sequence[str]) -> list[Task]:
    """The registered tasks whose rows have every one of ``columns``."""
    _import_builtins()
    return [t for t in _TASKS.values() if all(c in t.columns for c in columns)]


def task_for_suite(suite: str) -> Task:
    """The first registered task whose default suite is ``suite``, or one ``suite`` forwards its
    options to (verl's reward function with only ``suite`` given); a :class:`ConfigError` when none is."""
    _import_builtins()
    accepted = (suite, *suite_info(suite, where="reward_kwargs suite").forwards)
    for task in _TASKS.values():
        if task.suite in accepted:
            return task
    raise ConfigError(f"no task has suite {suite!r} as its default; name the task (reward_kwargs task: ...)")


def describe_all() -> list[dict[str, Any]]:
    return [t.describe() for t in (_TASKS[n] for n in available_tasks())]


def default_rewards(task: Task) -> Mapping[str, Any]:
    """The ``rewards:`` section a task trains with by default."""
    return {"suite": task.suite, "options": dict(task.suite_options), "weights": dict(task.weights) if task.weights else None}
