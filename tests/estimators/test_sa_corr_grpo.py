"""sa_corr_grpo: SA-MRPO's saturation weights inside CorrGRPO: a worked example, equal saturations
scale corr_grpo by (1 − s)^γ (its per-group loop parity: test_reference_parity.py; γ = 0 is
corr_grpo and a saturated component drops out: test_robust_corr.py)."""

import numpy as np
import pytest
import torch

import mrgrpo

F64 = torch.float64


def test_worked_example():
    # The orthogonal pair of test_corr_grpo (corr_grpo: [-0.707107, 0, 0, 0.707107]); ranges [0, 1],
    # both means 0.5 -> s = 0.5, γ = 1: both coefficients 0.5, ρ unchanged -> A = [-0.353553, 0, 0, 0.353553].
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=F64)
    got = mrgrpo.compute_advantages(rewards, [0] * 4, "sa_corr_grpo", reward_ranges=[(0, 1), (0, 1)], gamma=1.0, eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-0.353553, 0.0, 0.0, 0.353553], dtype=F64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("gamma", [0.5, 2.0])
def test_equal_saturations_scale_corr_grpo(make_batch, gamma):
    # Every s_k = 0.5 (ranges centred on the batch means): coefficients 0.5^γ w_k; the numerator
    # scales by 0.5^γ and ρ does not, so A = 0.5^γ corr_grpo (eps = 0).
    rewards, ids, weights = make_batch(8)
    ranges = [(float(m) - 2.0, float(m) + 2.0) for m in np.nanmean(rewards, axis=0)]
    got = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "sa_corr_grpo", weights, reward_ranges=ranges,
                                    gamma=gamma, eps=0.0)
    corr = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "corr_grpo", weights, eps=0.0)
    torch.testing.assert_close(got, 0.5**gamma * corr, atol=1e-9, rtol=1e-9)
