"""Training and evaluation rows of a run's ``task:`` section, through the task registry.

Kept for callers of ``build_dataset``; the tasks themselves (data, split, columns, suites,
rollout kind) live in :mod:`mrgrpo.tasks`.
"""

from __future__ import annotations

from typing import Any

from mrgrpo.tasks.base import plain_text
from mrgrpo.tasks.registry import resolve

__all__ = ["build_dataset", "plain_text"]


def build_dataset(config: Any, split: str = "train", chat: bool = True) -> Any:
    """The ``train`` (``size`` rows) or ``eval`` (``eval_size``, the task's test split) rows of ``config``
    (a ``TaskConfig``)."""
    task, spec = resolve(config)
    return task.rows(spec, split, chat)
