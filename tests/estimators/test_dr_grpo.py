"""dr_grpo (Dr. GRPO, arXiv 2503.20783): the centered weighted total, no std: worked example and
linearity (its per-group loop parity: test_reference_parity.py)."""

import numpy as np
import torch

import mrgrpo

F64 = torch.float64


def test_worked_example():
    # Weights (1, 0.5): totals [1, 0.5, 1.5], group mean 1 -> A = [0, -0.5, 0.5] (no division).
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=F64)
    got = mrgrpo.compute_advantages(rewards, [0, 0, 0], "dr_grpo", [1.0, 0.5])
    torch.testing.assert_close(got, torch.tensor([0.0, -0.5, 0.5], dtype=F64), atol=1e-12, rtol=0)


def test_linear_in_the_rewards_and_in_the_weights(make_batch):
    # Without a std, A(c r1 + r2) = c A(r1) + A(r2) on fully scored batches, and A is linear in the weights.
    r1, ids, weights = make_batch(2, nan=False, positive_weights=False)
    rng = np.random.default_rng(3)
    r2, other = rng.normal(size=r1.shape) * 4.0, rng.uniform(-1, 2, size=r1.shape[1])

    def adv(rewards, w):
        return mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "dr_grpo", w)

    torch.testing.assert_close(adv(2.5 * r1 + r2, weights), 2.5 * adv(r1, weights) + adv(r2, weights), atol=1e-9, rtol=0)
    torch.testing.assert_close(adv(r1, weights - 0.3 * other), adv(r1, weights) - 0.3 * adv(r1, other), atol=1e-9, rtol=0)
