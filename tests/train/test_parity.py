"""Parity: with grpo / gdpo at defaults, the advantages that reach the loss equal stock TRL's.

Both trainers see the same reward matrices: the reward functions return values drawn from a
generator seeded by (component, call number), independent of what the model generates, with
ties within groups (constant components), NaN (unscored) entries and one fully unscored row.
The advantages are captured at ``_compute_loss``, i.e. what the loss really multiplies.
"""

from __future__ import annotations

import pytest
import torch
from trl import GRPOTrainer

from mrgrpo.tasks import task_rows
from mrgrpo.train import MultiRewardGRPOTrainer
from mrgrpo.train.config import TaskConfig
from mrgrpo.train.presets import load_model

from .conftest import tiny_grpo_config

STEPS = 2
N = 8  # rollouts per step: 2 prompts x 4 generations


class ScriptedReward:
    """Reward component ``index``: a fixed pseudo-random sequence, one batch per call."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.calls = 0
        self.__name__ = f"r{index}"
        self.range = (0.0, 3.0)

    def __call__(self, prompts, completions, **kwargs):
        gen = torch.Generator().manual_seed(1000 * self.index + self.calls)
        self.calls += 1
        values = torch.randint(0, 4, (len(completions),), generator=gen).to(torch.float64).tolist()
        if self.index == 1:  # component 1 is constant in the first group
            values[:4] = [2.0] * 4
        out = [float(v) for v in values]
        if self.index == 2:  # component 2 leaves some rollouts unscored
            out[1] = None
            out[6] = None
        if self.index in (0, 1) and self.calls % 2 == 0:
            out[6] = None  # rollout 6: every component unscored on even calls
        return out


class Captured:
    def __init__(self):
        self.advantages: list[torch.Tensor] = []
        self.rewards: list[torch.Tensor] = []


def _capture(cls):
    class Recording(cls):
        def _calculate_rewards(self, *args, **kwargs):
            rewards = super()._calculate_rewards(*args, **kwargs)
            self.captured.rewards.append(rewards.clone())
            return rewards

        def _compute_loss(self, model, inputs):
            self.captured.advantages.append(inputs["advantages"].detach().clone())
            return super()._compute_loss(model, inputs)

    return Recording


@pytest.fixture(scope="module")
def dataset():
    return task_rows(TaskConfig(size=8, eval_size=1), "train", chat=True)


def _run(trainer_cls, dataset, tmp_path, weights, **kwargs) -> Captured:
    loaded = load_model("tiny")
    args = tiny_grpo_config(
        tmp_path, max_steps=STEPS, per_device_train_batch_size=N, num_generations=4, reward_weights=weights,
        **kwargs.pop("args", {}),
    )
    trainer = _capture(trainer_cls)(
        model=loaded.model,
        reward_funcs=[ScriptedReward(i) for i in range(3)],
        args=args,
        train_dataset=dataset,
        processing_class=loaded.tokenizer,
        **kwargs,
    )
    trainer.captured = Captured()
    trainer.train()
    return trainer.captured


@pytest.mark.parametrize(
    "trl_args, estimator, options",
    [
        ({"multi_objective_aggregation": "sum_then_normalize"}, "grpo", {}),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "gdpo", {}),
        ({"multi_objective_aggregation": "sum_then_normalize", "scale_rewards": "batch"}, "grpo", {"scale": "batch"}),
        ({"multi_objective_aggregation": "sum_then_normalize", "scale_rewards": "none"}, "dr_grpo", {}),
    ],
    ids=["grpo", "gdpo", "grpo-batch", "dr_grpo"],
)
def test_advantages_match_stock_trl(trl_args, estimator, options, dataset, tmp_path):
    weights = [1.0, 0.5, 2.0]
    stock = _run(GRPOTrainer, dataset, tmp_path / "stock", weights, args=trl_args)
    ours = _run(
        MultiRewardGRPOTrainer, dataset, tmp_path / "ours", weights, estimator=estimator, estimator_options=options
    )
    assert len(stock.advantages) == len(ours.advantages) == STEPS
    for step in range(STEPS):
        torch.testing.assert_close(ours.rewards[step], stock.rewards[step], equal_nan=True)
        # the scripted rewards really exercise ties, NaN and an unscored row
        assert torch.isnan(stock.rewards[step]).any()
        torch.testing.assert_close(ours.advantages[step], stock.advantages[step], rtol=1e-5, atol=1e-5)
        assert ours.advantages[step].abs().sum() > 0

