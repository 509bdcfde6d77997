"""Training prompts from reasoning-gym tasks, in the column contract of the ``math`` suite.

Each row: ``prompt`` (chat messages: system line, ``few_shot`` worked exchanges, the question;
or their plain-text join for models without a chat template), ``answer``, ``task``,
``task_config`` and ``task_entry`` (JSON), which :mod:`mrgrpo.rewards.math` grades with the
task's own scorer. The train split and the eval split use different generator seeds.
"""

from __future__ import annotations

import json
from typing import Any

from mrgrpo.train.config import TaskConfig

EVAL_SEED_OFFSET = 1_000_003
FEW_SHOT_SEED_OFFSET = 2_000_003


def _create(name: str, options: dict[str, Any], size: int, seed: int) -> Any:
    import reasoning_gym

    try:
        return reasoning_gym.create_dataset(name, size=size, seed=seed, **options)
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"task {name!r} with options {options}: {error}") from error


def _plain_text(messages: list[dict[str, str]]) -> str:
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


def few_shot_examples(config: TaskConfig) -> list[tuple[str, str]]:
    """``few_shot`` (question, reply) pairs from a seed the splits do not use."""
    from mrgrpo.rewards.math import format_answer

    if config.few_shot == 0:
        return []
    dataset = _create(config.name, config.options, config.few_shot, config.seed + FEW_SHOT_SEED_OFFSET)
    examples = []
    for entry in dataset:
        expression = (entry.get("metadata") or {}).get("expression")
        think = f"{expression} = {entry['answer']}" if expression else None
        reply = format_answer(str(entry["answer"]))
        examples.append((entry["question"], reply if think is None else f"{think}\n{reply}"))
    return examples


def build_rows(config: TaskConfig, split: str = "train", chat: bool = True) -> list[dict[str, Any]]:
    """The rows of one split (``train``: ``size`` prompts; ``eval``: ``eval_size``)."""
    from mrgrpo.data.math_prompt import math_prompt

    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    size, seed = (config.size, config.seed) if split == "train" else (config.eval_size, config.seed + EVAL_SEED_OFFSET)
    dataset = _create(config.name, config.options, size, seed)
    examples = few_shot_examples(config)
    system = config.system_prompt if config.system_prompt is not None else ""
    task_config = json.dumps(config.options, sort_keys=True)
    rows = []
    for entry in dataset:
        messages = math_prompt(entry["question"], system_prompt=system, examples=examples)
        rows.append(
            {
                "prompt": messages if chat else _plain_text(messages),
                "answer": str(entry["answer"]),
                "task": config.name,
                "task_config": task_config,
                "task_entry": json.dumps(entry, default=str),
            }
        )
    return rows


def build_dataset(config: TaskConfig, split: str = "train", chat: bool = True) -> Any:
    """A ``datasets.Dataset`` of :func:`build_rows`."""
    from datasets import Dataset

    return Dataset.from_list(build_rows(config, split, chat))
