"""dvao (DVAO, arXiv 2605.25604): worked example, errors, identity with grpo (its per-group loop parity: test_reference_parity.py)."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference

OPTIONS = [{}, {"eps": 0.0, "ddof": 0}, {"eps": 1e-2, "ddof": 1}]


def test_worked_example():
    # Population std, eps = 0, weights (1, 1).
    # group 0: r1 = [0, 0, 1, 1] (σ1 = 0.5, z1 = [-1, -1, 1, 1]),
    #          r2 = [1, 2, 3, 4] (σ2 = sqrt(1.25) = 1.118034, z2 = [-1.341641, -0.447214, 0.447214, 1.341641]).
    #   w̃1 = 0.5/1.618034 = 0.309017, w̃2 = 1.118034/1.618034 = 0.690983 (they sum to 1).
    #   A = 0.309017 z1 + 0.690983 z2: rollout 1: -0.309017 - 0.927051 = -1.236068,
    #   rollout 2: -0.309017 - 0.309017 = -0.618034, and the mirror images.
    # group 1: r1 constant (σ1 = 0 -> w̃1 = 0, w̃2 = 1), r2 = [0, 2]: A = z2 = [-1, 1].
    # group 2: one rollout: every σ is 0 -> A = 0.
    rewards = torch.tensor(
        [[0.0, 1.0], [0.0, 2.0], [1.0, 3.0], [1.0, 4.0], [5.0, 0.0], [5.0, 2.0], [1.0, 9.0]], dtype=torch.float64
    )
    got = mrgrpo.compute_advantages(rewards, [0, 0, 0, 0, 1, 1, 2], "dvao", eps=0.0, ddof=0)
    expected = torch.tensor([-1.236068, -0.618034, 0.618034, 1.236068, -1.0, 1.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("contiguous", [False, True])
def test_one_component_is_grpo(make_batch, options, contiguous):
    rewards, ids, _ = make_batch(5, k=1, contiguous=contiguous)
    r = torch.from_numpy(rewards)
    ours = mrgrpo.compute_advantages(r, ids, "dvao", **options)
    torch.testing.assert_close(ours, mrgrpo.compute_advantages(r, ids, "grpo", **options), atol=1e-12, rtol=0)


def test_weights_of_a_group_sum_to_one_so_scaling_all_weights_changes_nothing(make_batch):
    rewards, ids, weights = make_batch(6)
    r = torch.from_numpy(rewards)
    base = mrgrpo.compute_advantages(r, ids, "dvao", weights)
    torch.testing.assert_close(mrgrpo.compute_advantages(r, ids, "dvao", 3.0 * weights), base, atol=1e-12, rtol=0)


def test_mixed_sign_weights_that_cancel_give_zero_not_nan():
    # w = (1, -1) and equal spreads: Σ w σ = 0 in group 0 -> 0.
    rewards = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, 3.0]], dtype=torch.float64)
    got = mrgrpo.compute_advantages(rewards, [0, 0, 1, 1], "dvao", [1.0, -1.0])
    assert got[:2].tolist() == [0.0, 0.0] and bool(torch.isfinite(got).all())


@pytest.mark.parametrize("options,message", [({"eps": float("nan")}, "eps must be"), ({"ddof": "1"}, "ddof must be")])
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0, 2.0], [2.0, 1.0]], [0, 0], "dvao", **options)
    assert "\n" not in str(error.value)
