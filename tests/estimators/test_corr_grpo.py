"""corr_grpo (CorrGRPO): the centered total over sqrt(Σρ + eps): orthogonal and duplicated
components, shift invariance (its per-group loop parity: test_reference_parity.py; the paper's
Figure 2: test_worked_examples.py; the robust options: test_robust_corr.py)."""

import numpy as np
import torch

import mrgrpo

F64 = torch.float64


def test_worked_example_orthogonal_components():
    # r1 = [0, 1, 0, 1], r2 = [0, 0, 1, 1]: centered c1 = [-.5, .5, -.5, .5], c2 = [-.5, -.5, .5, .5],
    # c1·c2 = 0 so ρ = I and Σρ = 2; A = (c1 + c2) / sqrt(2) = [-0.707107, 0, 0, 0.707107] (eps = 0).
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=F64)
    got = mrgrpo.compute_advantages(rewards, [0] * 4, "corr_grpo", eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-0.707107, 0.0, 0.0, 0.707107], dtype=F64), atol=1e-6, rtol=0)


def test_a_duplicated_component_counts_once(make_batch):
    # [r, r]: ρ is all ones, Σρ = 4, numerator 2 (r − mean): A = r − mean, the dr_grpo of r alone.
    rewards, ids, _ = make_batch(6, k=1, nan=False)
    twice = np.concatenate([rewards, rewards], axis=1)
    got = mrgrpo.compute_advantages(torch.from_numpy(twice), ids, "corr_grpo", eps=0.0)
    once = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "dr_grpo")
    torch.testing.assert_close(got, once, atol=1e-9, rtol=1e-9)


def test_shifting_a_component_changes_nothing(make_batch):
    rewards, ids, weights = make_batch(7)
    shifted = rewards + np.array([3.0, -250.0, 0.5, 1e3])
    base = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "corr_grpo", weights)
    torch.testing.assert_close(mrgrpo.compute_advantages(torch.from_numpy(shifted), ids, "corr_grpo", weights), base,
                               atol=1e-9, rtol=1e-9)
