"""Properties every estimator must have, on random batches with variable group sizes."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mrgrpo

ALL = ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo"]
ZERO_SUM = ["grpo", "dr_grpo", "corr_grpo"]
RANGES = [(-10.0, 10.0)] * 4

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def batches(draw, k=3, allow_nan=False):
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=8))
    ids = np.repeat(np.arange(len(sizes)), sizes)
    ids = np.random.default_rng(draw(st.integers(0, 2**16))).permutation(ids)
    n = len(ids)
    # A few distinct levels make ties and constant groups common, as with real 0/1 rewards.
    level = st.sampled_from([0.0, 0.25, 1.0, -3.0, 7.5])
    # (no subnormal-scale values: an affine change would legitimately round them away)
    value = st.one_of(level, st.floats(-10, 10, allow_nan=False).filter(lambda x: x == 0 or abs(x) > 1e-3), *( [st.just(float("nan"))] if allow_nan else []))
    rows = draw(st.lists(st.lists(value, min_size=k, max_size=k), min_size=n, max_size=n))
    return torch.tensor(rows, dtype=torch.float64), torch.tensor(ids)


def run(name, rewards, ids, weights=None, **options):
    if name == "sa_mrpo":
        options.setdefault("reward_ranges", RANGES[: rewards.shape[1]])
    return mrgrpo.compute_advantages(rewards, ids, name, weights, **options)


def group_sums(adv, ids):
    return {int(g): adv[ids == g].sum().item() for g in ids.unique()}


@SETTINGS
@given(batches(allow_nan=True))
def test_outputs_are_finite(batch):
    rewards, ids = batch
    for name in ALL:
        adv = run(name, rewards, ids)
        assert adv.shape == (rewards.shape[0],)
        assert torch.isfinite(adv).all()


@SETTINGS
@given(batches())
def test_zero_sum_within_each_group(batch):
    rewards, ids = batch
    for name in ZERO_SUM:
        adv = run(name, rewards, ids)
        for g, total in group_sums(adv, ids).items():
            assert abs(total) < 1e-6 * max(1.0, adv.abs().max().item()), (name, g)


@SETTINGS
@given(batches(allow_nan=True), st.integers(0, 2**16))
def test_permuting_rows_permutes_output(batch, seed):
    rewards, ids = batch
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(ids)))
    for name in ALL:
        torch.testing.assert_close(run(name, rewards[perm], ids[perm]), run(name, rewards, ids)[perm], rtol=1e-9, atol=1e-9)


@SETTINGS
@given(batches(), st.integers(0, 2), st.floats(0.1, 50), st.floats(-20, 20))
def test_gdpo_invariant_to_positive_affine_change_of_one_component(batch, k, a, b):
    rewards, ids = batch
    changed = rewards.clone()
    changed[:, k] = a * changed[:, k] + b
    # eps = 0 so the invariance is exact up to rounding (eps = 1e-4 breaks it by design). With
    # eps = 0 the batch normalization would blow rounding noise up to O(1) when every summed
    # advantage is ~0 (components cancelling exactly), so such batches are not informative here.
    raw = run("gdpo", rewards, ids, eps=0.0, batch_norm=False)
    assume(raw.numel() < 2 or raw.std().item() > 1e-9)
    before = run("gdpo", rewards, ids, eps=0.0)
    after = run("gdpo", changed, ids, eps=0.0)
    torch.testing.assert_close(before, after, rtol=1e-6, atol=1e-6)


@SETTINGS
@given(batches(), st.integers(0, 2), st.floats(0.01, 100))
def test_corr_grpo_denominator_invariant_to_rescaling_one_component(batch, k, a):
    from mrgrpo.estimators.corr_grpo import correlation_sum
    from mrgrpo.estimators.groups import group_moments, make_groups

    rewards, ids = batch
    groups = make_groups(ids, len(ids))
    changed = rewards.clone()
    changed[:, k] *= a
    weights = torch.ones(rewards.shape[1], dtype=torch.float64)
    before = correlation_sum(groups.unrows(group_moments(rewards, groups).unscaled()) * weights, groups)
    after = correlation_sum(groups.unrows(group_moments(changed, groups).unscaled()) * weights, groups)
    torch.testing.assert_close(before, after, rtol=1e-7, atol=1e-7)
    assert (before >= 0).all()


@SETTINGS
@given(batches(allow_nan=True))
def test_sa_mrpo_with_gamma_zero_is_gdpo(batch):
    rewards, ids = batch
    torch.testing.assert_close(run("sa_mrpo", rewards, ids, gamma=0.0), run("gdpo", rewards, ids), rtol=1e-12, atol=1e-12)


@SETTINGS
@given(batches(k=1, allow_nan=True))
def test_gdpo_with_one_component_is_batch_normalized_grpo(batch):
    rewards, ids = batch
    # GDPO's sum of one z-score is GRPO's group-normalized advantage; then both are batch-normalized.
    from mrgrpo.estimators.groups import batch_standardize

    grpo = run("grpo", rewards, ids)
    scored = ~torch.isnan(rewards).all(dim=1)
    expected = batch_standardize(grpo, scored, ddof=1, eps=1e-4)
    torch.testing.assert_close(run("gdpo", rewards, ids), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ALL)
def test_constant_groups_give_exact_zeros(name):
    # group 0 constant in every component (0.1 repeated: its float mean is not exactly 0.1),
    # group 1 a single rollout, group 2 varies
    rewards = torch.tensor(
        [[0.1, 0.7, 3.3]] * 3 + [[0.5, 0.2, 1.0]] + [[0.0, 1.0, 2.0], [1.0, 0.0, 5.0], [0.5, 0.5, 0.0]],
        dtype=torch.float64,
    )
    ids = [0, 0, 0, 1, 2, 2, 2]
    adv = run(name, rewards, ids)
    if name in ZERO_SUM:
        assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    else:  # gdpo/sa_mrpo: group sum is 0 before batch normalization, so all four are equal
        raw = run(name, rewards, ids, batch_norm=False)
        assert raw[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert adv[4:].abs().sum() > 0


@pytest.mark.parametrize("name", ALL)
def test_component_constant_in_group_contributes_nothing(name):
    # component 1 is constant in the group: changing its (constant) level changes nothing
    rewards = torch.tensor([[0.0, 0.3], [1.0, 0.3], [1.0, 0.3], [0.0, 0.3]], dtype=torch.float64)
    shifted = rewards.clone()
    shifted[:, 1] = 0.9
    # (grpo/dr_grpo sum first, so the shift may move the last bit of the centered total)
    torch.testing.assert_close(run(name, rewards, [0] * 4), run(name, shifted, [0] * 4), rtol=1e-12, atol=1e-12)
