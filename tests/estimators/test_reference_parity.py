"""Vectorized estimators equal the per-group loop oracles, and TRL 1.16's own formulas."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.estimators import reference

ESTIMATORS = ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo", "sa_corr_grpo"]


def random_batch(seed, n_groups=40, k=4, nan_fraction=0.1, contiguous=False):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, size=n_groups)
    ids = np.repeat(np.arange(n_groups), sizes)
    if not contiguous:
        ids = rng.permutation(ids)
    n = len(ids)
    rewards = rng.normal(size=(n, k)) * rng.uniform(0.1, 20, size=k)
    rewards[:, 0] = rng.integers(0, 2, size=n)  # a binary reward: many constant groups
    rewards[rng.random((n, k)) < nan_fraction] = np.nan
    rewards[rng.random(n) < 0.03] = np.nan  # a few fully unscored rollouts
    weights = rng.uniform(-0.5, 2, size=k)
    return rewards, ids, weights


def options_for(name, k):
    return {"reward_ranges": [(-30.0, 30.0)] * k} if name in ("sa_mrpo", "sa_corr_grpo") else {}


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("seed", range(4))
def test_vectorized_equals_per_group_loop(name, seed, contiguous):
    rewards, ids, weights = random_batch(seed, contiguous=contiguous)
    options = options_for(name, rewards.shape[1])
    fast = mrgrpo.compute_advantages(torch.tensor(rewards), ids, name, weights, **options).numpy()
    slow = reference.REFERENCES[name](rewards, list(ids), weights, **options)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-9)


def trl_sum_then_normalize(rewards_per_func, weights, num_generations, scale_rewards="group"):
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, sum_then_normalize branch."""
    from trl.trainer.utils import nanstd

    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    mean = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards)
    else:
        std = nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_normalize_then_sum(rewards_per_func, weights, num_generations):
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, normalize_then_sum branch."""
    from trl.trainer.utils import nanstd

    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, rewards_per_func.shape[1])
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    advantages = (rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_batch(seed, groups=16, g=8, k=3):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.rand(groups * g, k, generator=gen, dtype=torch.float32)
    rewards[:, 0] = (rewards[:, 0] > 0.5).float()
    rewards[torch.rand(groups * g, k, generator=gen) < 0.05] = float("nan")
    weights = torch.tensor([1.0, 0.5, 0.25])
    ids = torch.arange(groups).repeat_interleave(g)
    return rewards, weights, ids, g


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_matches_trl_sum_then_normalize(seed, scale):
    rewards, weights, ids, g = trl_batch(seed)
    expected = trl_sum_then_normalize(rewards.double(), weights.double(), g, scale)
    ours = mrgrpo.compute_advantages(rewards, ids, "grpo", weights, scale=scale)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_gdpo_matches_trl_normalize_then_sum(seed):
    rewards, weights, ids, g = trl_batch(seed)
    expected = trl_normalize_then_sum(rewards.double(), weights.double(), g)
    ours = mrgrpo.compute_advantages(rewards, ids, "gdpo", weights)
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-5)
