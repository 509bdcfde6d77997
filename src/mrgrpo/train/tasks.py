"""Training and evaluation prompts of a run's ``task`` (reasoning-gym), via :mod:`mrgrpo.data`.

The rows follow the column contract of the ``math`` suite (``prompt``, ``answer``, ``task``,
``task_config``, ``task_entry``) and come from :func:`mrgrpo.data.reasoning_tasks.load_reasoning_gym`,
whose train and test splits and few-shot examples never share a question. For models without a
chat template the messages are joined into one plain-text prompt.
"""

from __future__ import annotations

from typing import Any

from mrgrpo.train.config import TaskConfig


def plain_text(messages: list[dict[str, str]]) -> str:
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


def build_dataset(config: TaskConfig, split: str = "train", chat: bool = True) -> Any:
    """The ``train`` (``size`` prompts) or ``eval`` (``eval_size``, the loader's test split) dataset."""
    from mrgrpo.data.reasoning_tasks import load_reasoning_gym

    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if config.name == "agentdojo":  # multi-turn tool use (mrgrpo.train.agent_rollout)
        from mrgrpo.train.agent_rollout import build_agentdojo_dataset

        size = config.size if split == "train" else config.eval_size
        return build_agentdojo_dataset(dict(config.options), split, chat, seed=config.seed, size=size)
    try:
        splits = load_reasoning_gym(
            {config.name: dict(config.options)},
            n_train=config.size,
            n_test=config.eval_size,
            seed=config.seed,
            few_shot=config.few_shot,
            system_prompt=config.system_prompt,
        )
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(f"task {config.name!r} with options {config.options}: {error}") from error
    dataset = splits["train" if split == "train" else "test"]
    if not chat:
        dataset = dataset.map(lambda row: {"prompt": plain_text(row["prompt"])})
    return dataset
