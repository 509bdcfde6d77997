"""rvpo (RVPO, arXiv 2605.05750): worked example, groups of one size against the loop (the
registry-wide parity test, tests/estimators/test_reference_parity.py, runs its option rows), the soft-min's limits
and bounds, not-scored entries, errors."""

import math

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shuffled", [False, True])
def test_groups_of_one_size_match_the_loop(rel_error, dtype, shuffled):
    # (TRL's layout, and verl's with every prompt sampled G times)
    rng = np.random.default_rng(3)
    rewards = np.stack([rng.integers(0, 2, 400), rng.random(400), (rng.random(400) * 4).round() / 4], axis=1).astype(dtype)
    ids = np.repeat(np.arange(100), 4)
    if shuffled:
        perm = rng.permutation(400)
        rewards, ids = rewards[perm], ids[perm]
    for kappa in (1.0, 0.1, 20.0):
        ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "rvpo", [1.0, 0.5, 2.0], kappa=kappa)
        expected = reference.rvpo(rewards.astype(np.float64), list(ids), [1.0, 0.5, 2.0], kappa=kappa)
        assert rel_error(ours, expected) <= (1e-6 if dtype == np.float32 else 1e-12)


def test_worked_example():
    # One group of 4, unbiased std, eps = 0, uniform p = (1/2, 1/2), kappa = 1.
    # r1 = [0, 0, 1, 1]: mean 0.5, std sqrt(1/3) -> z1 = [-0.866025, -0.866025, 0.866025, 0.866025]
    # r2 = [1, 0, 1, 0]:                          -> z2 = [0.866025, -0.866025, 0.866025, -0.866025]
    # rollouts 0 and 3 (one objective up, one down): A = -log(0.5 e^-0.866 + 0.5 e^0.866) = -log cosh(0.866025)
    #   = -0.335780 (GDPO's mean gives them 0); rollouts 1, 2 (both agree): -0.866025, 0.866025.
    # Whitened (eps = 0): mean -0.167890, unbiased std 0.733200 -> [-0.228983, -0.952175, 1.410140, -0.228983].
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    before = mrgrpo.compute_advantages(rewards, [0] * 4, "rvpo", eps=0.0, batch_norm=False)
    torch.testing.assert_close(before, torch.tensor([-0.335780, -0.866025, 0.866025, -0.335780], dtype=torch.float64), atol=1e-6, rtol=0)
    after = mrgrpo.compute_advantages(rewards, [0] * 4, "rvpo", eps=0.0)
    torch.testing.assert_close(after, torch.tensor([-0.228983, -0.952175, 1.410140, -0.228983], dtype=torch.float64), atol=1e-6, rtol=0)


def _zscores(rewards, ids, eps=1e-6):
    """Each component's in-group z-score ``[N, K]`` (mo_grpo on one column: its weight is 1)."""
    return torch.stack([mrgrpo.compute_advantages(rewards[:, [k]], ids, "mo_grpo", eps=eps) for k in range(rewards.shape[1])], dim=1)


@pytest.mark.parametrize("contiguous", [False, True])
def test_kappa_to_zero_is_gdpo(make_batch, contiguous):
    rewards, ids, weights = make_batch(4, contiguous=contiguous, nan=False)
    r = torch.from_numpy(rewards)
    p = weights / weights.sum()  # (with weights summing to 1 the batch eps acts alike)
    gdpo = mrgrpo.compute_advantages(r, ids, "gdpo", p, eps=1e-6)
    torch.testing.assert_close(mrgrpo.compute_advantages(r, ids, "rvpo", weights, kappa=0.0), gdpo, atol=1e-12, rtol=0)
    torch.testing.assert_close(mrgrpo.compute_advantages(r, ids, "rvpo", weights, kappa=-2.0), gdpo, atol=1e-12, rtol=0)
    # the limit: no cancellation for small kappa (log1p/expm1), the O(kappa) term is all that is left
    for kappa in (1e-6, 1e-9, 1e-300):
        near = mrgrpo.compute_advantages(r, ids, "rvpo", weights, kappa=kappa)
        torch.testing.assert_close(near, gdpo, atol=max(kappa * 10, 1e-12), rtol=0)


@pytest.mark.parametrize("contiguous", [False, True])
def test_kappa_to_infinity_is_the_worst_component(make_batch, contiguous):
    rewards, ids, weights = make_batch(5, contiguous=contiguous, nan=False)
    r = torch.from_numpy(rewards)
    worst = _zscores(r, ids).amin(dim=1)
    for kappa in (1e4, 1e8, 1e300):
        soft = mrgrpo.compute_advantages(r, ids, "rvpo", weights, kappa=kappa, batch_norm=False)
        # min z <= A <= min z + log(1 / p_min) / kappa
        bound = math.log(weights.sum() / weights.min()) / kappa
        assert bool(torch.isfinite(soft).all())
        assert bool(((soft - worst) >= -1e-12).all()) and bool(((soft - worst) <= bound + 1e-12).all())


@pytest.mark.parametrize("kappa", [0.1, 1.0, 10.0])
def test_between_the_worst_component_and_the_weighted_mean_and_decreasing_in_kappa(make_batch, kappa):
    rewards, ids, weights = make_batch(6, nan=False)
    r = torch.from_numpy(rewards)
    z = _zscores(r, ids)
    mean = z @ torch.from_numpy(weights / weights.sum())
    soft = mrgrpo.compute_advantages(r, ids, "rvpo", weights, kappa=kappa, batch_norm=False)
    assert bool((soft >= z.amin(dim=1) - 1e-12).all()) and bool((soft <= mean + 1e-12).all())
    riskier = mrgrpo.compute_advantages(r, ids, "rvpo", weights, kappa=2 * kappa, batch_norm=False)
    assert bool((riskier <= soft + 1e-12).all())


@pytest.mark.parametrize("contiguous", [False, True])
def test_one_component_is_grpo_whitened(make_batch, contiguous):
    rewards, ids, _ = make_batch(7, k=1, contiguous=contiguous)
    r = torch.from_numpy(rewards)
    z = mrgrpo.compute_advantages(r, ids, "grpo", eps=1e-6)
    torch.testing.assert_close(mrgrpo.compute_advantages(r, ids, "rvpo", batch_norm=False), z, atol=1e-12, rtol=0)
    # whitened: gdpo with one component is the whitened group z-score
    torch.testing.assert_close(mrgrpo.compute_advantages(r, ids, "rvpo", kappa=3.0), mrgrpo.compute_advantages(r, ids, "gdpo", eps=1e-6), atol=1e-12, rtol=0)


def test_not_scored_entries_leave_the_soft_min_and_p_is_renormalized():
    nan = float("nan")
    # group 0 (4 rows): component 1 not scored for row 0. Its z over rows 1..3 only.
    rewards = torch.tensor(
        [[0.0, nan], [0.0, 0.0], [1.0, 2.0], [1.0, 1.0], [nan, nan], [2.0, 5.0]], dtype=torch.float64
    )
    ids = [0, 0, 0, 0, 1, 1]
    got = mrgrpo.compute_advantages(rewards, ids, "rvpo", [1.0, 3.0], eps=0.0, batch_norm=False)
    z = _zscores(rewards, ids, eps=0.0).numpy()
    # row 0: only component 0 scored -> p = (1), A = z_00
    assert got[0].item() == pytest.approx(z[0, 0], abs=1e-12)
    # row 1: both scored, p = (1/4, 3/4): A = -log(p1 e^-z1 + p2 e^-z2)
    expected1 = -math.log(0.25 * math.exp(-z[1, 0]) + 0.75 * math.exp(-z[1, 1]))
    assert got[1].item() == pytest.approx(expected1, abs=1e-12)
    # row 4: nothing scored -> 0; row 5: a group of one with its only row -> z = 0
    assert got[4].item() == 0.0 and got[5].item() == 0.0
    whitened = mrgrpo.compute_advantages(rewards, ids, "rvpo", [1.0, 3.0])
    assert whitened[4].item() == 0.0  # and it is left out of the whitening:
    kept = [0, 1, 2, 3, 5]
    again = mrgrpo.compute_advantages(rewards[kept], [ids[i] for i in kept], "rvpo", [1.0, 3.0])
    torch.testing.assert_close(whitened[kept], again, atol=1e-12, rtol=0)


def test_finite_for_extreme_kappa_and_magnitudes():
    rng = np.random.default_rng(0)
    rewards = torch.from_numpy(rng.normal(size=(60, 3)) * [1e-200, 1.0, 1e200])
    ids = np.repeat(np.arange(15), 4)
    for kappa in (1e-300, 1.0, 1e300):
        assert bool(torch.isfinite(mrgrpo.compute_advantages(rewards, ids, "rvpo", kappa=kappa)).all())


@pytest.mark.parametrize(
    "options,message",
    [({"kappa": "high"}, "kappa must be a number"), ({"kappa": float("inf")}, "kappa must be finite"),
     ({"eps": -1e-6}, "eps must be"), ({"ddof": -1}, "ddof must be"), ({"batch_norm": 1}, "batch_norm must be True or False")],
)
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0, 2.0], [2.0, 1.0]], [0, 0], "rvpo", **options)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=message):  # the same check without data
        mrgrpo.validate_options("rvpo", options, 2)


@pytest.mark.parametrize("weights", [[1.0, -0.5], [0.0, 0.0]])
def test_weights_must_be_a_distribution(weights):
    with pytest.raises(ConfigError, match="rvpo: weights must be >= 0 with at least one > 0") as error:
        mrgrpo.compute_advantages([[1.0, 2.0], [2.0, 1.0]], [0, 0], "rvpo", weights)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kappa", [1.0, 2.0, 4.0])
def test_direct_soft_min_agrees_with_the_shifted_form_where_it_is_taken(make_batch, dtype, kappa):
    from mrgrpo.estimators.rvpo import direct_soft_min, soft_min

    rewards, ids, weights = make_batch(11, nan=False)
    z = _zscores(torch.from_numpy(rewards), ids).to(dtype)
    p = torch.from_numpy(weights / weights.sum()).to(dtype)
    direct = direct_soft_min(z, p, kappa, 1)
    assert direct is not None
    shifted = soft_min(z, p.unsqueeze(0).expand_as(z).contiguous(), kappa, 1)  # (per-row p: the shifted form)
    unit = torch.finfo(dtype).eps / 2
    assert float((direct - shifted).abs().max()) <= 8 * unit * float(shifted.abs().max())
    assert direct_soft_min(z, p, 1e-3, 1) is None  # (its rounding, (K + 4)u/κ, is too large there)
    assert direct_soft_min(z, p, 1e3, 1) is None  # (exp(κ·max|z|) would overflow)
