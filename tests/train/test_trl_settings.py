"""A TRL script's GRPOConfig keeps its meaning under MultiRewardGRPOTrainer, or is refused.

The TRL user path: the same reward functions and the same ``GRPOConfig`` go to stock
``GRPOTrainer`` and to ``MultiRewardGRPOTrainer``; with estimator ``grpo`` (or none named) the
advantages that reach the loss must be stock TRL's for every ``scale_rewards`` value, and
``normalize_then_sum`` must select gdpo. Settings that contradict the chosen estimator raise
before anything is built. A trainer that already subclasses ``GRPOTrainer`` adopts mrgrpo with
``MultiRewardMixin`` and keeps its own behaviour.
"""

from __future__ import annotations

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from mrgrpo import compute_advantages
from mrgrpo.errors import ConfigError
from mrgrpo.rewards.base import RewardComponent, RewardSuite
from mrgrpo.tasks import task_rows
from mrgrpo.train.config import TaskConfig
from mrgrpo.train.presets import load_model
from mrgrpo.train.trainer import MultiRewardGRPOTrainer, MultiRewardMixin, resolve_estimator

from .conftest import tiny_grpo_config

STEPS = 2
GENERATIONS = 4
WEIGHTS = [1.0, 0.5, 2.0]


class Reward:
    """Component ``index``: a fixed pseudo-random batch per call, independent of the completions
    (so two trainers see the same rewards), with ties, an unscored entry and, on even calls, a
    fully unscored rollout."""

    def __init__(self, index: int) -> None:
        self.index, self.calls, self.__name__ = index, 0, f"r{index}"

    def __call__(self, prompts, completions, **kwargs):
        gen = torch.Generator().manual_seed(7000 + 100 * self.index + self.calls)
        self.calls += 1
        out: list[float | None] = torch.randint(0, 4, (len(completions),), generator=gen).double().tolist()
        if self.index == 1:
            out[:GENERATIONS] = [1.0] * GENERATIONS  # constant in the first group
        if self.index == 2:
            out[1] = None
        if self.index < 2 and self.calls % 2 == 0:
            out[6] = None  # with component 2's None below: rollout 6 unscored by everyone
        if self.index == 2 and self.calls % 2 == 0:
            out[6] = None
        return out


def recording(cls):
    """``cls`` that keeps the gathered rewards and the advantages its loss multiplies."""

    class Recording(cls):
        def _calculate_rewards(self, *args, **kwargs):
            rewards = super()._calculate_rewards(*args, **kwargs)
            self.seen_rewards.append(rewards.clone())
            return rewards

        def _compute_loss(self, model, inputs):
            self.seen_advantages.append(inputs["advantages"].detach().clone())
            return super()._compute_loss(model, inputs)

    return Recording


@pytest.fixture(scope="module")
def dataset():
    return task_rows(TaskConfig(size=8, eval_size=1), "train", chat=True)


def grpo_config(tmp_path, **settings) -> GRPOConfig:
    return tiny_grpo_config(
        tmp_path,
        max_steps=STEPS,
        per_device_train_batch_size=2 * GENERATIONS,
        num_generations=GENERATIONS,
        reward_weights=WEIGHTS,
        **settings,
    )


def train(cls, dataset, args, **kwargs):
    loaded = load_model("tiny")
    trainer = recording(cls)(
        model=loaded.model,
        reward_funcs=[Reward(i) for i in range(3)],
        args=args,
        train_dataset=dataset,
        processing_class=loaded.tokenizer,
        **kwargs,
    )
    trainer.seen_rewards, trainer.seen_advantages = [], []
    trainer.train()
    assert len(trainer.seen_advantages) == STEPS
    return trainer


def assert_same_advantages(ours, stock):
    for step in range(STEPS):
        torch.testing.assert_close(ours.seen_rewards[step], stock.seen_rewards[step], equal_nan=True)
        assert torch.isnan(stock.seen_rewards[step]).all(dim=1).any() or step == 0
        torch.testing.assert_close(ours.seen_advantages[step], stock.seen_advantages[step], rtol=1e-5, atol=1e-5)
        assert ours.seen_advantages[step].abs().sum() > 0


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_every_scale_rewards_value_gives_stock_trl_advantages(scale_rewards, dataset, tmp_path):
    # (estimator=None resolves to the same grpo options: see the mapping table below)
    stock = train(GRPOTrainer, dataset, grpo_config(tmp_path / "stock", scale_rewards=scale_rewards))
    ours = train(
        MultiRewardGRPOTrainer, dataset, grpo_config(tmp_path / "ours", scale_rewards=scale_rewards), estimator="grpo"
    )
    assert ours.estimator == "grpo"
    assert ours.estimator_options.get("scale", "group") == scale_rewards
    assert_same_advantages(ours, stock)


def test_normalize_then_sum_without_an_estimator_is_gdpo(dataset, tmp_path):
    settings = {"multi_objective_aggregation": "normalize_then_sum"}
    stock = train(GRPOTrainer, dataset, grpo_config(tmp_path / "stock", **settings))
    ours = train(MultiRewardGRPOTrainer, dataset, grpo_config(tmp_path / "ours", **settings))
    assert ours.estimator == "gdpo"
    assert_same_advantages(ours, stock)


# ---------------------------------------------------------------- the mapping, without training


@pytest.mark.parametrize(
    "settings, estimator, options, expected",
    [
        ({}, None, {}, ("grpo", {})),
        ({"scale_rewards": "batch"}, "grpo", {}, ("grpo", {"scale": "batch"})),
        ({"scale_rewards": "none"}, None, {}, ("grpo", {"scale": "none"})),
        ({"scale_rewards": False}, "grpo", {}, ("grpo", {"scale": "none"})),
        ({"scale_rewards": "batch"}, "grpo", {"scale": "batch"}, ("grpo", {"scale": "batch"})),
        ({"scale_rewards": "none"}, "dr_grpo", {}, ("dr_grpo", {})),
        ({"multi_objective_aggregation": "normalize_then_sum"}, None, {}, ("gdpo", {})),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "sa_mrpo", {"gamma": 1.0}, ("sa_mrpo", {"gamma": 1.0})),
        ({}, "corr_grpo", {"shrinkage": 0.1}, ("corr_grpo", {"shrinkage": 0.1})),
        ({}, "grpo", {"scale": "batch"}, ("grpo", {"scale": "batch"})),  # a default cannot contradict
    ],
)
def test_settings_that_mean_the_same_thing_map_onto_the_estimator(settings, estimator, options, expected, tmp_path):
    assert resolve_estimator(grpo_config(tmp_path, **settings), estimator, options) == expected


@pytest.mark.parametrize(
    "settings, estimator, options, message",
    [
        ({"multi_objective_aggregation": "normalize_then_sum"}, "grpo", {}, "use estimator='gdpo'"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "corr_grpo", {}, "contradicts estimator 'corr_grpo'"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, "dr_grpo", {}, "drop the setting"),
        ({"scale_rewards": "batch"}, "gdpo", {}, "TRL ignores it under normalize_then_sum"),
        ({"scale_rewards": "batch"}, "dr_grpo", {}, "has no meaning for estimator 'dr_grpo'"),
        ({"scale_rewards": "none"}, "corr_grpo", {}, "estimator_options={'scale': 'none'}"),
        ({"scale_rewards": "none"}, "sa_mrpo", {}, "scales its own way"),
        ({"scale_rewards": "batch"}, "grpo", {"scale": "none"}, "contradicts estimator_options scale='none'"),
        (
            {"scale_rewards": "batch", "multi_objective_aggregation": "normalize_then_sum"},
            None,
            {},
            "has no meaning for estimator 'gdpo'",
        ),
    ],
)
def test_contradictory_settings_raise(settings, estimator, options, message, tmp_path):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("{", r"\{").replace("[", r"\[")):
        resolve_estimator(grpo_config(tmp_path, **settings), estimator, options)


def test_the_trainer_refuses_a_contradiction_before_building_anything(tmp_path):
    args = grpo_config(tmp_path, multi_objective_aggregation="normalize_then_sum")
    with pytest.raises(ConfigError, match="GRPOConfig\\(multi_objective_aggregation='normalize_then_sum'\\)"):
        MultiRewardGRPOTrainer(model=None, reward_funcs=[Reward(0)], args=args, estimator="corr_grpo")


def test_reward_weights_that_contradict_the_suite_raise(tmp_path):
    suite = RewardSuite(
        "two", (RewardComponent("a", (0.0, 1.0), Reward(0)), RewardComponent("b", (0.0, 1.0), Reward(1))), (1.0, 0.5)
    )
    args = grpo_config(tmp_path)
    args.reward_weights = [1.0, 1.0]
    with pytest.raises(ConfigError, match="contradicts the suite's weights"):
        MultiRewardGRPOTrainer(model=None, args=args, suite=suite, estimator="gdpo")


# ---------------------------------------------------------------- a user's own GRPOTrainer subclass


class CountingGRPOTrainer(GRPOTrainer):
    """Stands for a user's existing trainer: it adds its own behaviour around generation."""

    def __init__(self, *args, tag: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.tag, self.generation_calls, self.trl_advantages = tag, 0, []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.generation_calls += 1
        self.trl_advantages.append(output["advantages"].detach().clone())  # stock TRL's, under the mixin
        return output


class MyMultiRewardTrainer(MultiRewardMixin, CountingGRPOTrainer):
    pass


def test_the_mixin_adopts_mrgrpo_without_changing_the_base_class(dataset, tmp_path):
    trainer = train(
        MyMultiRewardTrainer, dataset, grpo_config(tmp_path), tag="mine", estimator="corr_grpo", diagnostics=False
    )
    assert isinstance(trainer, CountingGRPOTrainer) and trainer.tag == "mine"
    assert trainer.generation_calls == STEPS  # the user's override still runs
    for step in range(STEPS):
        rewards = trainer.seen_rewards[step]
        groups = torch.arange(rewards.shape[0]) // GENERATIONS
        expected = compute_advantages(rewards.double(), groups, "corr_grpo", weights=WEIGHTS).float()
        # TRL shuffles a generation batch before the loss sees it: compare as multisets
        torch.testing.assert_close(
            trainer.seen_advantages[step].sort().values, expected.sort().values, rtol=1e-5, atol=1e-5
        )
        # corr_grpo's advantages are what the loss used, not the stock ones the base class computed
        assert not torch.allclose(expected, trainer.trl_advantages[step], atol=1e-3)
    torch.testing.assert_close(trainer.last_advantages.float(), expected, rtol=1e-5, atol=1e-5)
    assert all("mrgrpo/advantages/mean" in entry for entry in trainer.state.log_history if "loss" in entry)
