"""reasoning-gym tasks as a GRPO dataset with a reproducible, disjoint train/test split.

reasoning-gym (``pip install reasoning-gym``) generates items procedurally from
``(task, config, seed, index)`` and grades answers with each task's own ``score_answer``.
For every task, items ``0, 1, 2, ...`` of ``create_dataset(task, seed=seed, **config)`` are
read in order, skipping a question already seen; the first ``few_shot`` distinct items become
the worked examples, the next ``n_test`` the test split, the next ``n_train`` the train split.
So no question is in two of them, and the test split does not change when ``n_train`` does.

Rows (the column contract of :mod:`mrgrpo.rewards.math`):

* ``prompt``: ``[system, (user, assistant) * few_shot, user]`` messages.
* ``answer``: the reference answer; ``task``: the reasoning-gym name;
  ``task_config``: JSON of the generating config; ``task_entry``: JSON of the entry
  ``{question, answer, metadata}`` (values JSON cannot hold are stored as strings);
  ``id``: ``"{task}/{seed}/{index}"``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from mrgrpo.errors import ConfigError, UserError
from mrgrpo.extras import import_extra, require

require("math", "reasoning-gym tasks (mrgrpo.data.reasoning_tasks)")

from datasets import Dataset, DatasetDict  # noqa: E402 (after the extra check)

from mrgrpo.data.math_prompt import Example, math_prompt
from mrgrpo.rewards.math import format_answer

SCAN_FACTOR = 20  # read at most this many items per distinct item needed before giving up


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


def to_json(value: Any) -> str:
    """JSON text of ``value``; what JSON cannot hold (Fraction, datetime, ...) becomes a string."""
    return json.dumps(value, default=_jsonable, sort_keys=True)


def worked_reply(entry: Mapping[str, Any], answer_format: str = "answer_tag", think: bool = False) -> str:
    """An assistant reply for a few-shot example: the task's expression (if any), then the answer."""
    answer = str(entry["answer"])
    expression = (entry.get("metadata") or {}).get("expression")
    working = f"{expression} = {answer}" if expression else f"The answer is {answer}."
    if think:
        return format_answer(answer, answer_format, think=working)
    return f"{working}\n{format_answer(answer, answer_format)}" if expression else format_answer(answer, answer_format)


def distinct_items(task: str, config: Mapping[str, Any], seed: int, count: int, skip: set[str] = frozenset()):
    """The first ``count`` items of a task with distinct questions (and none in ``skip``).

    Returns ``(dataset, [(index, entry), ...])``. Raises :class:`~mrgrpo.errors.ConfigError` when the task's
    configuration cannot yield that many distinct questions within ``SCAN_FACTOR * count`` items.
    """
    reasoning_gym = import_extra("reasoning_gym", "math", "reasoning-gym tasks")

    scan = max(SCAN_FACTOR * count, 100)
    try:
        dataset = reasoning_gym.create_dataset(task, seed=seed, size=scan, **config)
    except (AssertionError, ValueError, TypeError) as error:  # reasoning-gym checks its config with asserts
        if isinstance(error, UserError):
            raise
        reason = str(error).strip() or "its own check failed"
        raise ConfigError(f"reasoning-gym refuses the options of {task!r}: {reason}") from None
    seen, items = set(skip), []
    for index in range(scan):
        if len(items) == count:
            break
        entry = dataset[index]
        if entry["question"] in seen:
            continue
        seen.add(entry["question"])
        items.append((index, entry))
    if len(items) < count:
        raise ConfigError(
            f"reasoning-gym task {task!r} with config {dict(config)} gave only {len(items)} distinct "
            f"questions in {scan} items (needed {count}); ask for fewer items or widen the config"
        )
    return dataset, items


def load_reasoning_gym(
    tasks: str | Sequence[str] | Mapping[str, Mapping[str, Any]],
    n_train: int = 1000,
    n_test: int = 100,
    seed: int = 0,
    few_shot: int | Sequence[Example] = 1,
    answer_format: str = "answer_tag",
    think: bool = False,
    system_prompt: str | None = None,
) -> DatasetDict:
    """A ``DatasetDict`` with ``train`` and ``test`` splits of reasoning-gym tasks.

    Args:
        tasks: a task name, several names, or a mapping name -> config overrides
            (e.g. ``{"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}``).
        n_train, n_test: items *per task* in each split (train is shuffled across tasks with ``seed``).
        seed: reasoning-gym generation seed (and the train shuffle's).
        few_shot: the number of worked examples taken from each task (held out of both
            splits), or explicit ``(question, reply)`` pairs used for every task.
        answer_format, think: the format the prompt asks for (see :mod:`mrgrpo.rewards.math`).
        system_prompt: overrides the default system line (``""``: no system message).
    """
    if isinstance(tasks, str):
        tasks = {tasks: {}}
    elif not isinstance(tasks, Mapping):
        tasks = {name: {} for name in tasks}
    explicit = [] if isinstance(few_shot, int) else list(few_shot)
    n_shots = few_shot if isinstance(few_shot, int) else 0
    if min(n_train, n_test, n_shots) < 0:
        raise ConfigError("n_train, n_test and few_shot must be >= 0")
    splits: dict[str, list[dict[str, str]]] = {"train": [], "test": []}
    for task, config in tasks.items():
        skip = {question for question, _ in explicit}
        dataset, items = distinct_items(task, config, seed, n_shots + n_test + n_train, skip)
        config_json = to_json(dataclasses.asdict(dataset.config))
        examples = explicit or [(e["question"], worked_reply(e, answer_format, think)) for _, e in items[:n_shots]]
        for split, chosen in (("test", items[n_shots : n_shots + n_test]), ("train", items[n_shots + n_test :])):
            for index, entry in chosen:
                splits[split].append(
                    {
                        "prompt": math_prompt(entry["question"], system_prompt, examples, answer_format, think),
                        "answer": str(entry["answer"]),
                        "task": task,
                        "task_config": config_json,
                        "task_entry": to_json(entry),
                        "id": f"{task}/{seed}/{index}",
                    }
                )
    train = Dataset.from_list(splits["train"]) if splits["train"] else Dataset.from_dict({})
    test = Dataset.from_list(splits["test"]) if splits["test"] else Dataset.from_dict({})
    return DatasetDict(train=train.shuffle(seed=seed) if len(train) else train, test=test)
