"""mrgrpo reward suites as verl's ``custom_reward_function``.

verl config::

    reward:
      custom_reward_function:
        path: <python -c "import mrgrpo.integrations.verl_reward as m; print(m.__file__)">
        name: compute_score            # or compute_score_batch with reward_manager=batch
        reward_kwargs: {suite: math, suite_options: {length_thresholds: [256, 512]}}

        reward_kwargs: {task: bfcl}     # or {task: math, suite_options: {length_thresholds: [256, 512]}}

(In verl < 0.9 the block is top-level ``custom_reward_function``.) Settings come from
``reward_kwargs`` or, if absent there, the environment: ``MRGRPO_VERL_TASK``, ``MRGRPO_VERL_SUITE``,
``MRGRPO_VERL_SUITE_OPTIONS`` (JSON object), ``MRGRPO_VERL_WEIGHTS`` (JSON list or name -> weight).
The task comes from the task registry (:mod:`mrgrpo.tasks`): ``task``, else the ``mrgrpo_task``
entry that :meth:`mrgrpo.tasks.Task.verl_row` puts in each row's ``extra_info``, else the task
whose default suite is ``suite`` (default ``math``). The suite defaults to the task's.

Returns ``{"score": Σ_k w_k r_k, <component>: r_k, ...}``; verl uses ``score`` as the token-level
reward and copies every key into ``reward_extra_info`` / ``non_tensor_batch``, where
``algorithm.mrgrpo.components`` finds them. An unscored component (``None``) is NaN in its column
and counts 0 in ``score``. Column mapping: ``ground_truth`` becomes the task's ground-truth column
(math ``answer``, BFCL ``ground_truth``, code ``test``); every ``extra_info`` entry is passed as a
column of the same name (e.g. ``task``, ``task_entry``, ``functions``, ``entry_point``). Rows for
verl's parquet files: ``task.verl_row(row)`` for each row of ``task.rows(spec, "train")``.

This module imports no verl code: verl loads it by file path in its reward workers.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from mrgrpo.errors import ConfigError, InputError

# extra_info keys verl (or mrgrpo's verl rows) add; not reward columns
VERL_EXTRA_KEYS = ("num_turns", "rollout_reward_scores", "mrgrpo_task")


def _task(task: str | None, suite: str | None) -> Any:
    from mrgrpo.rewards import suite_info
    from mrgrpo.tasks import TaskSpec, resolve, task_for_suite

    if suite:
        suite_info(suite, where="reward_kwargs suite")  # an unknown suite is named as such
    if task:
        return resolve(TaskSpec(task))
    found = task_for_suite(suite or "math")
    return found, TaskSpec(found.name)


@functools.lru_cache(maxsize=16)
def _suite(task: str | None, suite: str | None, options_json: str, weights_json: str):
    from mrgrpo.tasks.prepare import build_suite

    found, spec = _task(task, suite)
    rewards = SimpleNamespace(suite=suite or found.suite, options=json.loads(options_json), components=None,
                              weights=json.loads(weights_json))
    return found, build_suite(found, found.resolve_options(spec.options), rewards)


def load_suite(
    suite: str | None = None,
    suite_options: Mapping[str, Any] | None = None,
    weights: Any = None,
    task: str | None = None,
):
    """The configured :class:`~mrgrpo.rewards.RewardSuite` (cached per settings)."""
    return load_task_suite(suite, suite_options, weights, task)[1]


def load_task_suite(
    suite: str | None = None,
    suite_options: Mapping[str, Any] | None = None,
    weights: Any = None,
    task: str | None = None,
):
    """``(task, suite)`` of the settings (see the module docstring); cached per settings."""
    task = task or os.environ.get("MRGRPO_VERL_TASK") or None
    suite = suite or os.environ.get("MRGRPO_VERL_SUITE") or None
    if suite_options is None:
        suite_options = json.loads(os.environ.get("MRGRPO_VERL_SUITE_OPTIONS", "{}") or "{}")
    if weights is None and os.environ.get("MRGRPO_VERL_WEIGHTS"):
        weights = json.loads(os.environ["MRGRPO_VERL_WEIGHTS"])
    if not isinstance(suite_options, Mapping):
        raise ConfigError(f"suite_options must be a mapping, got {suite_options!r}")
    plain_weights = dict(weights) if isinstance(weights, Mapping) else (list(weights) if weights is not None else None)
    return _suite(task, suite, json.dumps(dict(suite_options), sort_keys=True), json.dumps(plain_weights))


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    *,
    suite: str | None = None,
    suite_options: Mapping[str, Any] | None = None,
    weights: Any = None,
    task: str | None = None,
    **kwargs: Any,
) -> list[dict[str, float]]:
    """Score a batch (verl's ``reward_manager=batch`` signature); one dict per rollout."""
    n = len(solution_strs)
    if task is None and extra_infos:  # rows made by Task.verl_row name their task
        named = {(info or {}).get("mrgrpo_task") for info in extra_infos} - {None}
        if len(named) > 1:
            raise InputError(f"one batch holds rows of several tasks {sorted(named)}; score them separately")
        task = next(iter(named), None)
    found, reward_suite = load_task_suite(suite, suite_options, weights, task)
    if len(ground_truths) != n or len(data_sources) != n:
        raise InputError(f"{n} solutions, {len(ground_truths)} ground truths, {len(data_sources)} data sources")
    infos = [dict(info or {}) for info in (extra_infos if extra_infos is not None else [None] * n)]
    keys = sorted({k for info in infos for k in info} - set(VERL_EXTRA_KEYS))
    columns: dict[str, list[Any]] = {k: [info.get(k) for info in infos] for k in keys}
    columns[found.ground_truth] = list(ground_truths)
    columns.setdefault("data_source", list(data_sources))
    prompts = columns.pop("prompt", None) or [""] * n
    scores: dict[str, list[float | None]] = {
        c.name: c(prompts, list(solution_strs), **columns) for c in reward_suite.components
    }
    out = []
    for i in range(n):
        row: dict[str, float] = {}
        total = 0.0
        for component, weight in zip(reward_suite.components, reward_suite.weights):
            value = scores[component.name][i]
            row[component.name] = math.nan if value is None else float(value)
            total += 0.0 if value is None else weight * float(value)
        out.append({"score": total, **row})
    return out


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """verl's per-rollout ``compute_score``: ``{"score": weighted total, <component>: value, ...}``.

    ``kwargs``: ``task``, ``suite``, ``suite_options``, ``weights`` (from ``reward_kwargs``); others verl
    may add (e.g. ``reward_router_address``) are ignored.
    """
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]
