"""grpo (GRPO, DeepSeekMath arXiv 2402.03300; TRL's sum_then_normalize): worked examples for each
``scale``, scale invariance, ``scale="none"`` is dr_grpo (its per-group loop parity and TRL parity:
test_reference_parity.py)."""

import numpy as np
import pytest
import torch

import mrgrpo

F64 = torch.float64


def test_worked_example_group_scale():
    # One group, one component r = [0, 1, 1, 2], unbiased std, eps = 0: mean 1, std sqrt(2/3) = 0.816497
    # -> A = [-1, 0, 0, 1] / 0.816497 = [-1.224745, 0, 0, 1.224745].
    got = mrgrpo.compute_advantages(torch.tensor([[0.0], [1.0], [1.0], [2.0]], dtype=F64), [0] * 4, "grpo", eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-1.224745, 0.0, 0.0, 1.224745], dtype=F64), atol=1e-6, rtol=0)


def test_worked_example_batch_scale():
    # Groups {0, 2} and {10, 14}: centered [-1, 1] and [-2, 2], divided by the std of all four totals:
    # mean 6.5, squared deviations 42.25 + 20.25 + 12.25 + 56.25 = 131, /3 -> std 6.608076.
    # A = [-0.151330, 0.151330, -0.302660, 0.302660]: the wider group keeps its larger advantages.
    rewards = torch.tensor([[0.0], [2.0], [10.0], [14.0]], dtype=F64)
    got = mrgrpo.compute_advantages(rewards, [0, 0, 1, 1], "grpo", scale="batch", eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-0.151330, 0.151330, -0.302660, 0.302660], dtype=F64), atol=1e-6, rtol=0)
    group = mrgrpo.compute_advantages(rewards, [0, 0, 1, 1], "grpo", scale="group", eps=0.0)
    torch.testing.assert_close(group[:2], group[2:])  # per-group scaling erases the width difference


@pytest.mark.parametrize("factor", [1e-3, 7.0, 1e4])
def test_group_scale_is_invariant_to_scaling_the_rewards(make_batch, factor):
    rewards, ids, weights = make_batch(0)
    base = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "grpo", weights, eps=0.0)
    scaled = mrgrpo.compute_advantages(torch.from_numpy(rewards * factor), ids, "grpo", weights, eps=0.0)
    torch.testing.assert_close(scaled, base, atol=1e-9, rtol=1e-9)


def test_scale_none_is_dr_grpo(make_batch):
    rewards, ids, weights = make_batch(1, positive_weights=False)
    none = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "grpo", weights, scale="none")
    np.testing.assert_allclose(none.numpy(), mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "dr_grpo", weights).numpy(),
                               rtol=0, atol=1e-12)
