"""Run by tests/train/test_feedback.py under ``torchrun --nproc_per_node 2`` (CPU, gloo): two
ctwa steps of MultiRewardGRPOTrainer; each process writes what it saw to ``$OUT/rank<r>.json``."""

from __future__ import annotations

import importlib
import json
import os
import sys
import types

import torch

from mrgrpo.tasks import task_rows
from mrgrpo.train import MultiRewardGRPOTrainer
from mrgrpo.train.config import TaskConfig
from mrgrpo.train.job import end_process_group
from mrgrpo.train.presets import load_model

# (the training tests' folder as a package of its own: its modules import each other relatively)
_package = types.ModuleType("_train_tests")
_package.__path__ = [os.path.dirname(os.path.abspath(__file__))]
sys.modules["_train_tests"] = _package
tiny_grpo_config = importlib.import_module("_train_tests.conftest").tiny_grpo_config


class Reward:
    """Component ``index``: pseudo-random values in {0, 1, 2, 3}, from the call count and the process."""

    def __init__(self, index: int) -> None:
        self.index, self.calls = index, 0
        self.__name__ = f"r{index}"

    def __call__(self, prompts, completions, **kwargs):
        rank = int(os.environ.get("RANK", "0"))
        gen = torch.Generator().manual_seed(1000 * self.index + 10 * self.calls + rank)
        self.calls += 1
        return torch.randint(0, 4, (len(completions),), generator=gen).to(torch.float64).tolist()

OPTIONS = {"cov_targets": [0.5, 0.4, 0.3], "gate_by_obj_targets": False, "lr": 0.5, "ema_tau": 0.5}


class Recording(MultiRewardGRPOTrainer):
    def apply_pending_feedback(self):
        pending = self._pending_feedback
        new = self._policy_logps(pending["input_ids"], pending["attention_mask"], pending["logits_to_keep"])
        local = self.policy_signal(new, pending)
        state_before = pending["state"]
        rewards = pending["values"].double().tolist()
        super().apply_pending_feedback()
        self.record.append({
            "local_signal": local.tolist(), "signal": self.last_policy_signal.tolist(), "rewards": rewards,
            "state_before": state_before, "state_after": self.estimator_state,
        })


def main() -> None:
    out = sys.argv[1]
    loaded = load_model("tiny")
    args = tiny_grpo_config(
        out, max_steps=2, per_device_train_batch_size=4, num_generations=4, reward_weights=[0.5, 0.3, 0.2],
        learning_rate=5e-3, epsilon=0.02,
    )
    trainer = Recording(
        model=loaded.model, reward_funcs=[Reward(i) for i in range(3)], args=args,
        train_dataset=task_rows(TaskConfig(size=8, eval_size=1), "train", chat=True),
        processing_class=loaded.tokenizer, estimator="ctwa", estimator_options=OPTIONS,
    )
    trainer.record = []
    trainer.train()
    rank = trainer.accelerator.process_index
    with open(os.path.join(out, f"rank{rank}.json"), "w") as handle:
        json.dump({"world": trainer.accelerator.num_processes, "record": trainer.record}, handle)
    # as a user's script should: a gloo group left alive can abort the interpreter at exit (SIGABRT)
    end_process_group()


if __name__ == "__main__":
    main()
