"""Numerics at the edges: float32 within 1e-6 of float64, every finite magnitude exact, finite
results in the returned dtype (or an error naming the overflow), and a clear message for
tensors without data."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import InputError
from mrgrpo.estimators import reference

ESTIMATORS = ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo", "sa_corr_grpo"]
RANGES = [(-200.0, 200.0)] * 4


def options_for(name):
    return {"reward_ranges": RANGES} if name in ("sa_mrpo", "sa_corr_grpo") else {}


def batch(seed, contiguous, offset=0.0, nan=False, groups=300, g=8):
    rng = np.random.default_rng(seed)
    n = groups * g
    rewards = rng.normal(size=(n, 4)) * [1.0, 0.01, 5.0, 0.3] + offset
    rewards[:, 0] = rng.integers(0, 2, size=n) + offset  # binary: constant groups
    if nan:
        rewards[rng.random((n, 4)) < 0.1] = np.nan
    ids = np.repeat(np.arange(groups), g)
    if not contiguous:
        perm = rng.permutation(n)
        rewards, ids = rewards[perm], ids[perm]
    weights = np.array([1.0, 0.5, 0.25, -0.3])
    return rewards.astype(np.float32), ids, weights


def relative_error(ours, expected):
    expected = np.asarray(expected, dtype=np.float64)
    return np.abs(ours.double().numpy() - expected).max() / np.abs(expected).max()


@pytest.mark.parametrize("offset", [0.0, 100.0])
@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_float32_is_computed_in_float32_within_1e6_of_the_float64_oracle(name, contiguous, offset):
    # An offset of 100 on every component is where a float32 sum of the components would cancel.
    rewards, ids, weights = batch(0, contiguous, offset)
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, name, weights, **options_for(name))
    assert ours.dtype == torch.float32
    expected = reference.REFERENCES[name](rewards.astype(np.float64), list(ids), weights, **options_for(name))
    assert relative_error(ours, expected) <= 1e-6


@pytest.mark.parametrize("name", ESTIMATORS)
def test_float32_with_nan_within_1e6_of_the_float64_oracle(name):
    rewards, ids, weights = batch(1, contiguous=False, nan=True)
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, name, weights, **options_for(name))
    expected = reference.REFERENCES[name](rewards.astype(np.float64), list(ids), weights, **options_for(name))
    assert relative_error(ours, expected) <= 1e-6


def test_float64_inputs_stay_float64():
    rewards, ids, weights = batch(2, contiguous=False)
    r64 = rewards.astype(np.float64)
    for name in ESTIMATORS:
        ours = mrgrpo.compute_advantages(torch.from_numpy(r64), ids, name, weights, **options_for(name))
        assert ours.dtype == torch.float64
        expected = reference.REFERENCES[name](r64, list(ids), weights, **options_for(name))
        assert relative_error(ours, expected) <= 1e-12, name


# Scale-free forms: eps = 0 makes grpo/gdpo/sa_mrpo invariant to a common scale s, and
# dr_grpo/corr_grpo (raw numerator) homogeneous of degree 1 in s.
INVARIANT = {"grpo": {"eps": 0.0}, "gdpo": {"eps": 0.0}, "sa_mrpo": {"eps": 0.0, "gamma": 0.0}}
HOMOGENEOUS = {"dr_grpo": {}, "corr_grpo": {}}


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e-160, 1e160, 1e200, 1e300])
def test_exact_over_the_whole_float64_range(scale):
    rewards, ids, weights = batch(3, contiguous=False, groups=40)
    base = torch.from_numpy(rewards.astype(np.float64))
    ranges = {"reward_ranges": [(-200.0 * scale, 200.0 * scale)] * 4}
    for name, options in {**INVARIANT, **HOMOGENEOUS}.items():
        if name == "sa_mrpo":
            options = {**options, **ranges}
        expected = mrgrpo.compute_advantages(base, ids, name, weights, **(options if name != "sa_mrpo" else {**options, "reward_ranges": RANGES}))
        got = mrgrpo.compute_advantages(base * scale, ids, name, weights, **options)
        assert torch.isfinite(got).all(), name
        if name in HOMOGENEOUS:
            got = got / scale
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * expected.abs().max().item(), msg=name)


def test_groups_of_very_different_magnitudes_in_one_batch():
    # group 0 near 1e300, group 1 near 1e-300: each gets the advantages it would get alone
    one = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [0.5, 3.0]], dtype=torch.float64)
    both = torch.cat([one * 1e300, one * 1e-300])
    ids = [0] * 4 + [1] * 4
    for name, options in INVARIANT.items():
        options = {**options, **({"reward_ranges": [(0.0, 1e301)] * 2} if name == "sa_mrpo" else {})}
        got = mrgrpo.compute_advantages(both, ids, name, **{**options, "batch_norm": False} if name != "grpo" else options)
        alone = mrgrpo.compute_advantages(one, [0] * 4, name, **{**options, "batch_norm": False} if name != "grpo" else options)
        torch.testing.assert_close(got[:4], alone, rtol=1e-12, atol=1e-12, msg=name)
        torch.testing.assert_close(got[4:], alone, rtol=1e-12, atol=1e-12, msg=name)
    corr = mrgrpo.compute_advantages(both, ids, "corr_grpo")
    alone = mrgrpo.compute_advantages(one, [0] * 4, "corr_grpo")
    torch.testing.assert_close(corr[:4] / 1e300, alone, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(corr[4:] / 1e-300, alone, rtol=1e-12, atol=0.0)


def test_squares_that_would_underflow_still_give_exact_correlations():
    # values ~1e-170: their squares (1e-340) underflow float64; CorrGRPO's Σρ must not change
    rewards = torch.tensor([[0.1, 0.3], [0.2, 0.1], [0.4, 0.4], [0.3, 0.2]], dtype=torch.float64)
    expected = mrgrpo.compute_advantages(rewards, [0] * 4, "corr_grpo")
    got = mrgrpo.compute_advantages(rewards * 1e-170, [0] * 4, "corr_grpo") / 1e-170
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12 * expected.abs().max().item())


@pytest.mark.parametrize(
    "dtype,big", [(torch.float16, 6.0e4), (torch.bfloat16, 3.0e38), (torch.float32, 3.0e38)]
)
def test_results_are_finite_in_the_returned_dtype_or_the_overflow_is_named(dtype, big):
    rewards = torch.tensor([[big, big], [-big, -big], [0.0, 0.0], [big, big]], dtype=dtype)
    ids = [0, 0, 1, 1]
    for name in ("grpo", "gdpo", "corr_grpo"):
        # corr_grpo: two perfectly correlated components, Σρ = 4, so A = ±2·big/2 = ±big: fits
        adv = mrgrpo.compute_advantages(rewards, ids, name)
        assert adv.dtype == dtype and torch.isfinite(adv).all(), name
    corr = mrgrpo.compute_advantages(rewards, ids, "corr_grpo").double()
    assert corr[0].item() == pytest.approx(2 * big / 2 / 1.0, rel=1e-2)
    # Dr. GRPO's centered total is ±2·big: it does not fit, and the message says so
    with pytest.raises(InputError, match=r"dr_grpo advantages overflow " + str(dtype).removeprefix("torch.")):
        mrgrpo.compute_advantages(rewards, ids, "dr_grpo")
    assert torch.isfinite(mrgrpo.compute_advantages(rewards.double(), ids, "dr_grpo")).all()


def test_a_weighted_total_beyond_float64_is_named():
    rewards = torch.tensor([[1e308, 1e308], [0.0, 0.0]], dtype=torch.float64)
    with pytest.raises(InputError, match="weighted total of the rewards overflows float64"):
        mrgrpo.compute_advantages(rewards, [0, 0], "grpo", weights=[1.0, 1.0])
    # a sum that only overflows on the way is recomputed, not rejected
    adv = mrgrpo.compute_advantages(torch.tensor([[1e308, -1e308, 1e308], [0.0, 0.0, 0.0]], dtype=torch.float64), [0, 0], "grpo")
    assert adv.tolist() == pytest.approx([0.7071067, -0.7071067], rel=1e-6)


def test_meta_tensors_get_a_message_not_a_torch_error():
    with pytest.raises(InputError, match="meta device"):
        mrgrpo.compute_advantages(torch.empty(4, 2, device="meta"), [0, 0, 1, 1])
    with pytest.raises(InputError, match="meta device"):
        mrgrpo.compute_advantages(torch.zeros(4, 2), torch.empty(4, dtype=torch.long, device="meta"))


@pytest.mark.parametrize("g", [2, 3, 5])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_float32_contiguous_blocks_of_any_size_match_the_oracle(name, g):
    rewards, ids, weights = batch(4, contiguous=True, groups=50, g=g)
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, name, weights, **options_for(name))
    expected = reference.REFERENCES[name](rewards.astype(np.float64), list(ids), weights, **options_for(name))
    assert relative_error(ours, expected) <= 1e-6


# --- the index layout's GRPO paths (shuffled or ragged groups: verl's layout) -------------


def ragged_batch(seed, dtype):
    """Shuffled groups of 1 to 12 rollouts, non-dyadic values, and constant groups of 3, 5 and 7
    identical rows (whose float64 mean is not exactly their value)."""
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([rng.integers(1, 13, size=200), [3, 5, 7]])
    ids = np.repeat(np.arange(sizes.size), sizes)
    rewards = rng.normal(size=(ids.size, 3)) / 3.0
    rewards[:, 0] = rng.integers(0, 2, size=ids.size) / 3.0
    constant = ids >= 200
    rewards[constant] = np.float64(1.0 / 3.0) + 1e3
    perm = rng.permutation(ids.size)
    return rewards[perm].astype(dtype), ids[perm], constant[perm]


@pytest.mark.parametrize("eps", [1e-4, 0.0])
@pytest.mark.parametrize("ddof", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_shuffled_ragged_groups_match_the_oracle_and_constant_groups_are_exact_zeros(name, dtype, ddof, eps):
    rewards, ids, constant = ragged_batch(5, dtype)
    weights = np.array([1.0, 0.3, -0.7])
    options = {"ddof": ddof, "eps": eps} if name == "grpo" else {}
    ours = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, name, weights, **options)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = reference.REFERENCES[name](rewards.astype(np.float64), list(ids), weights, **options)
    # groups of at most ddof rollouts with eps = 0: std + eps = 0, and mrgrpo's convention is 0
    undefined = ~np.isfinite(expected)
    assert (ours[torch.from_numpy(undefined)] == 0).all()
    kept = torch.from_numpy(~undefined)
    assert relative_error(ours[kept], expected[~undefined]) <= (1e-6 if dtype == np.float32 else 1e-12)
    assert (ours[torch.from_numpy(constant)] == 0).all()


def test_a_spread_far_below_the_groups_magnitude_is_still_exact():
    # T = 1e6 + 1/3 + k·2⁻²⁰: a one-pass or two-pass float64 mean would be off by ~1e-10, i.e.
    # 4e-5 of this group's std; the answer must be exact for the float64 values given.
    from fractions import Fraction

    k = np.array([0, 1, 3, 4, 9, 2, 7, 5], dtype=np.float64)
    group = (1e6 + 1.0 / 3.0) + k * 2.0**-20
    other = np.array([0.1, 0.7, 0.3, 0.9, 0.2, 0.4, 0.6, 0.8])
    values = np.concatenate([group, other])
    ids = np.array([0] * 8 + [1] * 8)
    perm = np.random.default_rng(0).permutation(16)
    ours = mrgrpo.compute_advantages(torch.from_numpy(values[perm, None]), ids[perm], "grpo", eps=1e-12)

    exact = [Fraction(float(v)) for v in group]
    mean = sum(exact) / 8
    std = float(sum((v - mean) ** 2 for v in exact) / 7) ** 0.5
    expected = np.array([float(v - mean) / (std + 1e-12) for v in exact])
    got = ours.numpy()[np.argsort(perm)][:8]
    assert np.abs(got - expected).max() <= 1e-9 * np.abs(expected).max()


@pytest.mark.parametrize("scale", [1e-300, 1e-170, 1e-100, 1e100, 1e160, 1e300])
def test_grpo_on_shuffled_groups_is_invariant_to_a_common_scale_of_rewards_and_eps(scale):
    rewards, ids, constant = ragged_batch(6, np.float64)
    base = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "grpo", eps=1e-4)
    scaled = mrgrpo.compute_advantages(torch.from_numpy(rewards) * scale, ids, "grpo", eps=1e-4 * scale)
    torch.testing.assert_close(scaled, base, rtol=1e-9, atol=1e-9)
    assert (scaled[torch.from_numpy(constant)] == 0).all()
