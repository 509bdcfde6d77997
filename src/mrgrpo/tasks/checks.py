"""The checks that pair a task with a reward suite, run before any model is loaded.

* :func:`check_suite_options`: every ``rewards.options`` key is an option of the suite (or of a
  suite it forwards options to); a misplaced one names the suite it belongs to.
* :func:`check_columns`: the task's rows provide every column the suite declares it reads.
* :func:`check_scorable`: every component scores at least one of a few sample rows.

What a suite reads and takes comes from the suite registry
(:func:`mrgrpo.rewards.base.suite_info`); which tasks could serve instead from the task
registry. Each failure is one :class:`~mrgrpo.errors.ConfigError` line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.rewards.base import suite_info, suites_with_option
from mrgrpo.tasks.base import Task
from mrgrpo.tasks.registry import tasks_providing

SAMPLE_ROWS = 8  # rows scored by the pre-model-load check (every component must score one of them)


def suite_factory(name: str) -> Callable[..., Any]:
    """The registered factory of reward suite ``name`` (an :class:`~mrgrpo.errors.UnknownNameError`
    naming ``rewards.suite`` when unknown)."""
    return suite_info(name, where="rewards.suite").factory


def check_suite_options(suite: str, options: Mapping[str, Any]) -> None:
    """Options that the suite's factory does not take (e.g. a preset's leftover math option) are errors."""
    info = suite_info(suite, where="rewards.suite")
    unknown = [k for k in options if k not in info.option_names]
    if unknown and not info.open_ended:
        owners = suites_with_option(unknown[0])
        hint = f"; it is an option of suite {', '.join(owners)}" if owners else ""
        raise ConfigError(
            f"rewards.options: {', '.join(unknown)} is not an option of suite {suite!r} "
            f"(its options: {', '.join(n for n in info.option_names if n != 'tokenizer') or 'none'}){hint}"
        )


def check_columns(task: Task, suite: str) -> None:
    """A suite that reads a column the task does not provide is an error naming both."""
    needed = suite_info(suite, where="rewards.suite").columns
    missing = [c for c in needed if c not in task.columns]
    if missing:
        fits = [t.name for t in tasks_providing(needed)]
        raise ConfigError(
            f"suite {suite!r} needs column(s) {', '.join(missing)}, which task {task.name!r} does not provide "
            f"(it provides {', '.join(task.columns)}); use suite {task.suite!r} with this task"
            + (f", or a task that provides them: {', '.join(fits)}" if fits else "")
        )


def check_scorable(task: Task, suite: Any, dataset: Any) -> dict[str, float]:
    """Every component of ``suite`` scores at least one of the first :data:`SAMPLE_ROWS` rows
    (their reference completions, where the task knows one). Returns each component's mean on them.

    A component that returns nothing but ``None`` would train with zero signal: a :class:`ConfigError`,
    except a ``sparse`` one (it abstains on some rows by design, e.g. code ``efficiency`` on problems
    too fast to time) on rows that carry a reference: its mean is then NaN (not scored)."""
    n = min(SAMPLE_ROWS, len(dataset))
    if n == 0:
        raise ConfigError(f"task {task.name!r}: no rows (check task.size and task.options)")
    rows = [dataset[i] for i in range(n)]
    references = [task.reference(row) for row in rows]
    has_reference = any(references)
    completions = [r or "" for r in references]
    columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
    prompts = [row["prompt"] for row in rows]
    means: dict[str, float] = {}
    silent: list[str] = []
    for component in suite.components:
        try:
            values = component(prompts, completions, **columns)
        except (KeyError, ValueError, TypeError) as error:
            raise ConfigError(
                f"suite {suite.name!r}: component {component.name!r} cannot score rows of task {task.name!r}: {error}"
            ) from None
        kept = [v for v in values if v is not None]
        if not kept:
            if getattr(component, "sparse", False) and has_reference:
                means[component.name] = math.nan  # abstained on these rows by design (NaN = not scored)
            else:
                silent.append(component.name)
        else:
            means[component.name] = sum(kept) / len(kept)
    if silent:
        keep = [c for c in suite.names if c not in silent]
        raise ConfigError(
            f"suite {suite.name!r}: component(s) {', '.join(silent)} scored none of {n} sample rows of task "
            f"{task.name!r} (they would train with zero signal, e.g. no reference solution to compare with); "
            f"set rewards.components: [{', '.join(keep)}] or give the rows what they read"
        )
    return means
