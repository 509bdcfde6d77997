"""Logging each training step's reward batch to ``rollouts.jsonl`` (read by ``mrgrpo analyze``).

One JSON line per rollout: ``step``, ``group_id`` (``"<step>:<group>"``, unique over the run),
and one field per reward component (``null`` = not scored), so the file is also a valid input of
``mrgrpo advantages`` and ``mrgrpo diagnose``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from mrgrpo.rollouts import ROLLOUTS_FILE


def rollout_lines(step: int, rewards: Any, group_ids: Any, names: list[str]) -> list[str]:
    """JSON lines of one step's gathered reward matrix ``[N, K]`` and group ids ``[N]``."""
    lines = []
    for row, group in zip(rewards.tolist(), group_ids.tolist()):
        record: dict[str, Any] = {"step": step, "group_id": f"{step}:{int(group)}"}
        for name, value in zip(names, row):
            record[name] = None if value is None or not math.isfinite(value) else value
        lines.append(json.dumps(record))
    return lines


class RolloutLogger(TrainerCallback):
    """Appends the reward batch of every training step to ``run_dir/rollouts.jsonl``.

    Needs ``trainer`` (a :class:`~mrgrpo.train.trainer.MultiRewardGRPOTrainer`, set after the
    trainer is built) and reads its ``last_rewards`` (the gathered matrix of the last scored
    batch) at the end of each step. On resume, lines of steps after the checkpoint are dropped.
    """

    def __init__(self, run_dir: str | Path, trainer: Any = None) -> None:
        self.path = Path(run_dir) / ROLLOUTS_FILE
        self.trainer = trainer
        self._logged_ids: int | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from mrgrpo.train.callbacks import truncate_jsonl

        truncate_jsonl(self.path, int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self.trainer
        rewards = getattr(trainer, "last_rewards", None) if trainer is not None else None
        if rewards is None or not state.is_world_process_zero or id(rewards) == self._logged_ids:
            return
        self._logged_ids = id(rewards)
        values = rewards.detach().to("cpu").double()
        group_ids = trainer.group_ids(values.shape[0], "train")
        with self.path.open("a") as handle:
            handle.write("".join(line + "\n" for line in rollout_lines(int(state.global_step), values, group_ids, trainer.reward_names)))
