"""gdpo_loo (NeMo-RL's GDPO): NeMo-RL's formulas (the per-group loop over its option rows is
the registry-wide parity test, tests/estimators/test_reference_parity.py), worked example, groups
of two, the others-all-equal case, not-scored entries, errors."""

import math

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference


def graded_batch(seed, groups, size, shuffled):
    """Binary and graded components (many rows whose others are all equal) and a continuous one."""
    rng = np.random.default_rng(seed)
    n = groups * size
    rewards = np.stack([rng.integers(0, 2, n), (rng.random(n) * 4).round() / 4, rng.random(n), rng.integers(0, 2, n)], axis=1)
    ids = np.repeat(np.arange(groups), size)
    if shuffled:
        perm = rng.permutation(n)
        rewards, ids = rewards[perm], ids[perm]
    return rewards, ids


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("size", [3, 4, 8])
def test_groups_of_one_size_match_the_loop(rel_error, dtype, shuffled, size, nan):
    # (TRL's layout, and verl's with every prompt sampled G times: the entry-by-entry recomputation;
    # with NaN, the recomputation of the moments of the groups concerned)
    rewards, ids = graded_batch(size, 120, size, shuffled)
    if nan:
        rewards[np.random.default_rng(size).random(rewards.shape) < 0.1] = np.nan
    rewards = rewards.astype(dtype)
    weights = [1.0, 0.5, -0.3, 2.0]
    for options in ({}, {"leave_one_out": False}, {"eps": 0.0}):
        ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo_loo", weights, **options)
        expected = reference.gdpo_loo(rewards.astype(np.float64), list(ids), weights, **options)
        assert rel_error(ours, expected) <= (1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ragged_groups_without_nan_match_the_loop(make_batch, rel_error, dtype):
    rewards, ids, weights = make_batch(11, nan=False, positive_weights=False)
    rewards[:, 1] = np.round(rewards[:, 1])  # (many rows whose others are all equal)
    rewards = rewards.astype(dtype)
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo_loo", weights)
    expected = reference.gdpo_loo(rewards.astype(np.float64), list(ids), weights)
    assert rel_error(ours, expected) <= (1e-6 if dtype == np.float32 else 1e-12)


def nemo_rl_gdpo(rewards, ids, weights, leave_one_out):
    """NeMo-RL's GDPOAdvantageEstimator as a formula (restated here, float64): per prompt and
    component, baseline = (M r)/m and its square mean (M r²)/m with M the all-ones matrix minus
    the identity for leave-one-out (m = n − 1) or all ones (m = n); std = sqrt((E[r²] − E[r]²)
    · m/(m − 1)) with NaN set to 0; a group with at most one row has baseline = reward; divide
    by (std + 1e-6) where std > 0; weighted sum; (A − mean)/std(unbiased) over every row."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    ids = torch.as_tensor(ids)
    total = torch.zeros(r.shape[0], dtype=torch.float64)
    for k in range(r.shape[1]):
        baseline = r[:, k].clone()
        std = torch.zeros_like(baseline)
        for g in ids.unique():
            rows = (ids == g).nonzero().flatten()
            if rows.numel() <= 1:
                continue
            mask = torch.ones(rows.numel(), rows.numel(), dtype=torch.float64) - (torch.eye(rows.numel()) if leave_one_out else 0)
            m = torch.tensor(rows.numel() - int(leave_one_out), dtype=torch.float64)  # (m/(m − 1) = inf for m = 1)
            mean = mask @ r[rows, k] / m
            square = mask @ r[rows, k].pow(2) / m
            baseline[rows] = mean
            std[rows] = ((square - mean.square()) * (m / (m - 1))).sqrt().nan_to_num(0)
        a = r[:, k] - baseline
        a = torch.where(std > 0, a / (std + 1e-6), a)
        total += weights[k] * a
    spread = total.std()
    return (total - total.mean()) / spread if spread > 0 else total - total.mean()


@pytest.mark.parametrize("leave_one_out", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_matches_nemo_rl_where_its_variance_has_no_residue(seed, leave_one_out):
    # continuous rewards: no row's others are all equal; groups of 1 to 6 rows, shuffled
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, size=25)
    ids = rng.permutation(np.repeat(np.arange(25), sizes))
    rewards = rng.random((ids.size, 3)) * [1.0, 5.0, 0.2]
    weights = [1.0, -0.5, 2.0]
    expected = nemo_rl_gdpo(rewards, ids, weights, leave_one_out)
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo_loo", weights, leave_one_out=leave_one_out)
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)


def test_worked_example_others_all_equal_is_an_exact_zero_std():
    # One group, one component r = [0.7, 0.7, 0.7, 1.3], leave-one-out, eps 1e-6.
    # rows 0-2: others [0.7, 0.7, 1.3]: mean 0.9, std sqrt((0.04 + 0.04 + 0.16)/2) = 0.346410
    #   -> a = -0.2/(0.346410 + 1e-6) = -0.577349.
    # row 3: others [0.7, 0.7, 0.7]: mean 0.7, std 0 -> no division: a = 0.6.
    # Whitened (three equal values and one other): [-0.5, -0.5, -0.5, 1.5].
    rewards = torch.tensor([[0.7], [0.7], [0.7], [1.3]], dtype=torch.float64)
    before = mrgrpo.compute_advantages(rewards, [0] * 4, "gdpo_loo", batch_norm=False)
    torch.testing.assert_close(before, torch.tensor([-0.577349, -0.577349, -0.577349, 0.6], dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        mrgrpo.compute_advantages(rewards, [0] * 4, "gdpo_loo"), torch.tensor([-0.5, -0.5, -0.5, 1.5], dtype=torch.float64),
        atol=1e-12, rtol=0,
    )
    # NeMo-RL's one-pass variance leaves a rounding residue for row 3 and divides by ~1e-6
    r = rewards[:, 0]
    others = torch.ones(4, 4, dtype=torch.float64) - torch.eye(4, dtype=torch.float64)
    mean, square = others @ r / 3, others @ r.pow(2) / 3
    one_pass_std = ((square - mean.square()) * 1.5).sqrt()[3].item()
    assert 0 < one_pass_std < 1e-7 and 0.6 / (one_pass_std + 1e-6) == pytest.approx(5.9e5, rel=0.01)


@pytest.mark.parametrize("contiguous", [False, True])
def test_two_rows_per_group_give_the_whitened_differences(contiguous):
    # leave-one-out with two rows: the other row is the baseline and s = 0 (one row), so each row
    # gets D_g = Σ_k w_k (r_ik − r_jk) and its partner −D_g; whitened: ±|D_g| / sqrt(2 Σ_g D_g² / (N − 1)).
    rng = np.random.default_rng(1)
    rewards = rng.random((20, 3))
    ids = np.repeat(np.arange(10), 2)
    weights = np.array([1.0, 0.5, -2.0])
    if not contiguous:
        perm = rng.permutation(20)
        rewards, ids = rewards[perm], ids[perm]
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo_loo", weights).numpy()
    d = np.zeros(20)
    for g in range(10):
        i, j = np.flatnonzero(ids == g)
        d[i] = (rewards[i] - rewards[j]) @ weights
        d[j] = -d[i]
    # (the mean of ±D_g is 0; Σ_i d_i² = 2 Σ_g D_g²)
    np.testing.assert_allclose(ours, d / math.sqrt((d**2).sum() / (20 - 1)), atol=1e-12, rtol=0)
    # one group of two: ±sign(d)/√2
    one = mrgrpo.compute_advantages(torch.tensor([[0.2, 1.0], [0.9, 0.0]], dtype=torch.float64), [0, 0], "gdpo_loo", [1.0, 0.1])
    torch.testing.assert_close(one, torch.tensor([-1.0, 1.0], dtype=torch.float64) / math.sqrt(2), atol=1e-12, rtol=0)


def test_without_leave_one_out_it_is_the_group_zscore_summed_and_whitened_without_eps(make_batch):
    rewards, ids, weights = make_batch(9, nan=False, positive_weights=False)
    r = torch.from_numpy(rewards)
    summed = mrgrpo.compute_advantages(r, ids, "mo_grpo", weights, eps=1e-6, ddof=1)
    expected = (summed - summed.mean()) / summed.std()
    torch.testing.assert_close(mrgrpo.compute_advantages(r, ids, "gdpo_loo", weights, leave_one_out=False), expected, atol=1e-12, rtol=0)


def test_not_scored_entries_and_groups_of_one():
    nan = float("nan")
    rewards = torch.tensor(
        [[1.0, nan], [2.0, 5.0], [4.0, 1.0], [nan, nan], [3.0, 3.0], [7.0, 2.0]], dtype=torch.float64
    )
    ids = [0, 0, 0, 0, 1, 2]
    got = mrgrpo.compute_advantages(rewards, ids, "gdpo_loo", [1.0, 1.0], batch_norm=False).tolist()
    # component 0 of group 0: rows 0-2 scored [1, 2, 4]: a row's others are two values, s their std
    s0, s1, s2 = math.sqrt(2.0), math.sqrt(4.5), math.sqrt(0.5)
    c0 = [(1 - 3.0) / (s0 + 1e-6), (2 - 2.5) / (s1 + 1e-6), (4 - 1.5) / (s2 + 1e-6)]
    # component 1 of group 0: rows 1-2 scored [5, 1]: one other row each, s = 0 -> ±4
    expected = [c0[0], c0[1] + 4.0, c0[2] - 4.0, 0.0, 0.0, 0.0]  # (groups 1, 2: one row each -> 0)
    assert got == pytest.approx(expected, abs=1e-12)
    whitened = mrgrpo.compute_advantages(rewards, ids, "gdpo_loo", [1.0, 1.0])
    assert whitened[3].item() == 0.0  # not scored: 0, and out of the batch step
    scored = torch.tensor([v for i, v in enumerate(expected) if i != 3], dtype=torch.float64)
    torch.testing.assert_close(whitened[[0, 1, 2, 4, 5]], (scored - scored.mean()) / scored.std(), atol=1e-12, rtol=0)


def test_constant_batch_gives_exact_zeros():
    rewards = torch.tensor([[1.0, 2.0]] * 6, dtype=torch.float64)
    assert mrgrpo.compute_advantages(rewards, [0, 0, 0, 1, 1, 1], "gdpo_loo").tolist() == [0.0] * 6
    assert mrgrpo.compute_advantages([[3.0, 1.0]], [0], "gdpo_loo").tolist() == [0.0]


@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1e150, 1e300])
@pytest.mark.parametrize("contiguous", [False, True])
def test_without_eps_continuous_rewards_are_scale_free_over_the_float64_range(scale, contiguous):
    # (with eps = 0 and no row whose others are all equal, every score is a ratio of differences)
    rng = np.random.default_rng(2)
    rewards = torch.from_numpy(rng.normal(size=(200, 3)) + [0.0, 3.0, -1.0])
    ids = np.repeat(np.arange(40), 5) if contiguous else rng.permutation(np.repeat(np.arange(40), 5))
    base = mrgrpo.compute_advantages(rewards, ids, "gdpo_loo", eps=0.0)
    scaled = mrgrpo.compute_advantages(rewards * scale, ids, "gdpo_loo", eps=0.0)
    assert bool(torch.isfinite(scaled).all())
    torch.testing.assert_close(scaled, base, atol=1e-9, rtol=0)


def test_binary_rewards_at_extreme_magnitudes_stay_finite(rel_error):
    rewards, ids = graded_batch(0, 30, 4, shuffled=False)
    for scale in (1e-300, 1e300):
        got = mrgrpo.compute_advantages(torch.from_numpy(rewards * scale), ids, "gdpo_loo")
        assert bool(torch.isfinite(got).all())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_contiguous_recomputation_falls_back_where_the_others_std_leaves_the_safe_window(rel_error, dtype, monkeypatch):
    # A flagged row (the others all but equal) whose others differ by 1e-20: their squares
    # leave float32's safe window, so the contiguous recomputation hands over to the general one.
    import mrgrpo.estimators.gdpo_loo as module

    refused = []
    original = module._others_std

    def spy(columns, row):
        out = original(columns, row)
        refused.append(out is None)
        return out

    monkeypatch.setattr(module, "_others_std", spy)
    rng = np.random.default_rng(0)
    rewards = rng.random((40, 3))
    rewards[:8, 0] = [0, 1e-20, 0, 0, 0, 0, 0, 1]
    rewards[8:16, 1] = [0, 0, 0, 1, 0, 0, 0, 0]
    rewards = rewards.astype(dtype)
    ids = np.repeat(np.arange(5), 8)
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "gdpo_loo", [1.0, 0.5, 2.0])
    expected = reference.gdpo_loo(rewards.astype(np.float64), list(ids), [1.0, 0.5, 2.0])
    assert refused[0] == (dtype == np.float32)
    assert rel_error(ours, expected) <= (1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize(
    "options,message",
    [({"leave_one_out": "yes"}, "leave_one_out must be True or False"), ({"eps": -1e-6}, "eps must be"),
     ({"batch_norm": 0}, "batch_norm must be True or False")],
)
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0, 2.0], [2.0, 1.0]], [0, 0], "gdpo_loo", **options)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match=message):  # the same check without data
        mrgrpo.validate_options("gdpo_loo", options, 2)
