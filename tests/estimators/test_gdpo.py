"""gdpo (GDPO; TRL's normalize_then_sum): worked example with and without the batch normalization,
invariance to scaling the weights (its per-group loop parity and TRL parity: test_reference_parity.py;
affine invariance per component: test_properties.py)."""

import pytest
import torch

import mrgrpo

F64 = torch.float64
REWARDS = torch.tensor([[0.0, 1.0], [0.0, 2.0], [1.0, 3.0], [1.0, 4.0]], dtype=F64)


def test_worked_example():
    # One group of 4, population std, eps = 0, weights (1, 0.5):
    # z1 = [-1, -1, 1, 1]; z2 = [-1.5, -0.5, 0.5, 1.5] / 1.118034 = [-1.341641, -0.447214, 0.447214, 1.341641];
    # s = z1 + 0.5 z2 = [-1.670820, -1.223607, 1.223607, 1.670820] (batch_norm=False stops here).
    # batch norm: mean 0, population std sqrt((1.670820² + 1.223607²) / 2) = 1.464386
    # -> A = [-1.140970, -0.835577, 0.835577, 1.140970].
    summed = mrgrpo.compute_advantages(REWARDS, [0] * 4, "gdpo", [1.0, 0.5], eps=0.0, ddof=0, batch_norm=False)
    torch.testing.assert_close(summed, torch.tensor([-1.670820, -1.223607, 1.223607, 1.670820], dtype=F64), atol=1e-6, rtol=0)
    got = mrgrpo.compute_advantages(REWARDS, [0] * 4, "gdpo", [1.0, 0.5], eps=0.0, ddof=0)
    torch.testing.assert_close(got, torch.tensor([-1.140970, -0.835577, 0.835577, 1.140970], dtype=F64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("factor", [0.01, 3.0, 250.0])
def test_batch_normalized_output_ignores_a_common_factor_on_the_weights(make_batch, factor):
    rewards, ids, weights = make_batch(4)
    base = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo", weights, eps=0.0)
    scaled = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo", weights * factor, eps=0.0)
    torch.testing.assert_close(scaled, base, atol=1e-9, rtol=1e-9)
