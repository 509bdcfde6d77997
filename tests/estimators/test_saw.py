"""saw (SAW, arXiv 2606.07705): worked example, errors, equal-CV identities (its per-group loop parity: test_reference_parity.py)."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference

@pytest.mark.parametrize("mode", ["grpo", "gdpo"])
def test_float32_with_a_large_offset_is_within_1e6_of_the_float64_loop(make_batch, rel_error, mode):
    # An offset of 100 on every component: where float32 batch moments would cancel.
    rewards, ids, weights = make_batch(4, nan=False)
    rewards = (rewards * [1.0, 0.01, 5.0, 0.3] + 100.0).astype(np.float32)
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "saw", weights, mode=mode)
    expected = reference.saw(rewards.astype(np.float64), list(ids), weights, mode=mode)
    assert rel_error(ours, expected) <= 1e-6


REWARDS = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)


def test_worked_example_mode_grpo():
    # reward_mins (0, 0): r1 = [0, 0, 1, 1]: mean 0.5, unbiased std 0.577350 -> CV1 = 1.154701;
    # r2 = [1, 1, 1, 0]: mean 0.75, std 0.5 -> CV2 = 0.666667; Σ CV = 1.821367.
    # ω = 2 CV / Σ CV = (1.267949, 0.732051): the component that moves more relative to its level gains.
    # T = ω1 r1 + ω2 r2 = [0.732051, 0.732051, 2.0, 1.267949]; mean 1.183013;
    # deviations [-0.450962, -0.450962, 0.816987, 0.084936], unbiased var 0.360472, std 0.600393
    # -> A (eps 0) = [-0.751111, -0.751111, 1.360754, 0.141468].
    got = mrgrpo.compute_advantages(REWARDS, [0] * 4, "saw", reward_mins=[0, 0], eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-0.751111, -0.751111, 1.360754, 0.141468], dtype=torch.float64), atol=1e-6, rtol=0)


def test_worked_example_mode_gdpo():
    # z1 = [-0.866025, -0.866025, 0.866025, 0.866025], z2 = [0.5, 0.5, 0.5, -1.5] (unbiased, eps 0);
    # S = 1.267949 z1 + 0.732051 z2 = [-0.732051, -0.732051, 1.464102, 0];
    # whitened: mean 0, unbiased std sqrt((2 * 0.535898 + 2.143594)/3) = 1.035276
    # -> A = [-0.707107, -0.707107, 1.414214, 0].
    got = mrgrpo.compute_advantages(REWARDS, [0] * 4, "saw", mode="gdpo", reward_mins=[0, 0], eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-0.707107, -0.707107, 1.414214, 0.0], dtype=torch.float64), atol=1e-6, rtol=0)


def equal_cv_batch(make_batch, contiguous):
    # Component 2 holds the same values as component 1 in another order: equal batch mean, std and
    # minimum, so equal CVs (and ω = 1 each when delta = 0).
    rewards, ids, weights = make_batch(9, k=2, contiguous=contiguous, nan=False)
    rewards[:, 1] = np.random.default_rng(1).permutation(rewards[:, 0] * 3.0 + rewards[:, 1])
    rewards[:, 0] = np.random.default_rng(2).permutation(rewards[:, 1])
    return torch.from_numpy(rewards), ids, weights


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("mode,peer", [("grpo", "grpo"), ("gdpo", "gdpo")])
def test_equal_cvs_give_the_plain_estimator(make_batch, contiguous, mode, peer):
    r, ids, weights = equal_cv_batch(make_batch, contiguous)
    exact = mrgrpo.compute_advantages(r, ids, "saw", weights, mode=mode, delta=0.0)
    torch.testing.assert_close(exact, mrgrpo.compute_advantages(r, ids, peer, weights), atol=1e-12, rtol=0)
    default = mrgrpo.compute_advantages(r, ids, "saw", weights, mode=mode)  # delta 1e-8: ω = 1 - O(1e-8)
    torch.testing.assert_close(default, mrgrpo.compute_advantages(r, ids, peer, weights), atol=1e-6, rtol=0)


def test_no_variation_anywhere_gives_equal_weights_and_zeros():
    rewards = torch.ones(4, 2, dtype=torch.float64)
    assert mrgrpo.compute_advantages(rewards, [0, 0, 1, 1], "saw").tolist() == [0.0] * 4


@pytest.mark.parametrize(
    "options,message",
    [({"mode": "sum"}, "mode must be one of"), ({"reward_mins": [0.0]}, "reward_mins must be 2 finite"),
     ({"reward_mins": "low"}, "reward_mins must be"), ({"delta": -1.0}, "delta must be in"), ({"eps": "1e-4"}, "eps must be")],
)
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0, 2.0], [2.0, 1.0]], [0, 0], "saw", **options)
    assert "\n" not in str(error.value)
