"""sa_mrpo (SA-MRPO): saturation weights w_k (1 − s_k)^γ inside GDPO: a worked example, equal
saturations give GDPO (its per-group loop parity: test_reference_parity.py; the paper's sign flip:
test_worked_examples.py; γ = 0 is gdpo: test_properties.py)."""

import numpy as np
import torch

import mrgrpo

F64 = torch.float64


def test_worked_example():
    # Ranges [0, 1]; r1 = [0.9, 1.0, 0.8, 0.9] (mean 0.9: s1 = 0.9), r2 = [0, 1, 0, 1] (s2 = 0.5); γ = 0.5:
    # coefficients sqrt(0.1) = 0.316228 and sqrt(0.5) = 0.707107. Population std, eps = 0, no batch norm:
    # z1 = [0, 0.1, -0.1, 0] / 0.070711 = [0, 1.414214, -1.414214, 0], z2 = [-1, 1, -1, 1];
    # A = 0.316228 z1 + 0.707107 z2 = [-0.707107, 1.154320, -1.154320, 0.707107]: the saturated
    # component still moves rollouts 2 and 3, with less than a third of its GDPO weight.
    rewards = torch.tensor([[0.9, 0.0], [1.0, 1.0], [0.8, 0.0], [0.9, 1.0]], dtype=F64)
    got = mrgrpo.compute_advantages(rewards, [0] * 4, "sa_mrpo", reward_ranges=[(0, 1), (0, 1)], eps=0.0, ddof=0,
                                    batch_norm=False)
    torch.testing.assert_close(got, torch.tensor([-0.707107, 1.154320, -1.154320, 0.707107], dtype=F64), atol=1e-6, rtol=0)


def test_equal_saturations_give_gdpo(make_batch):
    # Ranges centred on each component's batch mean: every s_k = 0.5, so the coefficients are
    # sqrt(0.5) w_k, a common factor that the batch normalization removes.
    rewards, ids, weights = make_batch(5)
    means = np.nanmean(rewards, axis=0)
    ranges = [(float(m) - 1.0, float(m) + 1.0) for m in means]
    got = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "sa_mrpo", weights, reward_ranges=ranges, eps=0.0)
    gdpo = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo", weights, eps=0.0)
    torch.testing.assert_close(got, gdpo, atol=1e-9, rtol=1e-9)
