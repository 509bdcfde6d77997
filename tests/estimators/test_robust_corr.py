"""Robust CorrGRPO options (issue: CorrGRPO's failure modes), sa_corr_grpo and the EMA state."""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mrgrpo
from mrgrpo.estimators import reference

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def adv(rewards, ids, estimator="corr_grpo", weights=None, **options):
    return mrgrpo.compute_advantages(torch.as_tensor(rewards, dtype=torch.float64), ids, estimator, weights, **options)


@st.composite
def batches(draw, k=3, min_size=1, max_size=6):
    sizes = draw(st.lists(st.integers(min_size, max_size), min_size=1, max_size=6))
    ids = np.repeat(np.arange(len(sizes)), sizes)
    value = st.one_of(st.sampled_from([0.0, 1.0, -2.0, 0.5]), st.floats(-5, 5).filter(lambda x: x == 0 or abs(x) > 1e-3))
    rows = draw(st.lists(st.lists(value, min_size=k, max_size=k), min_size=len(ids), max_size=len(ids)))
    return torch.tensor(rows, dtype=torch.float64), torch.from_numpy(ids)


# Failure mode (1): G = 2, two rewards that disagree -> ρ = −1, Σρ = 0 -> num / sqrt(eps).
DISAGREE = [[1.0, 0.0], [0.0, 2.0]]


def test_plain_corr_grpo_explodes_on_anti_correlated_pairs():
    # centered total [-0.5, 0.5], Σρ = 1 + 1 − 2 = 0 -> 0.5 / sqrt(1e-6) = 500
    assert adv(DISAGREE, [0, 0]).tolist() == pytest.approx([-500.0, 500.0])


def test_floor_bounds_the_amplification():
    # floor f = 0.5: 0.5 / sqrt(0.5 + 1e-6)
    assert adv(DISAGREE, [0, 0], min_corr_sum=0.5)[1].item() == pytest.approx(0.5 / math.sqrt(0.5 + 1e-6))


def test_fixed_shrinkage_mixes_in_the_identity():
    # Σρ' = (1 − 0.3)·0 + 0.3·2 = 0.6
    assert adv(DISAGREE, [0, 0], shrinkage=0.3)[1].item() == pytest.approx(0.5 / math.sqrt(0.6 + 1e-6))


def test_auto_shrinkage_is_total_at_two_rollouts():
    # G = 2: λ = P / (dof · Σ_{l≠m} ρ²) = 2 / (1 · 2) = 1 -> Σρ' = 2 (identity)
    assert adv(DISAGREE, [0, 0], shrinkage="auto")[1].item() == pytest.approx(0.5 / math.sqrt(2 + 1e-6))


def test_auto_shrinkage_against_direct_formula():
    rng = np.random.default_rng(3)
    block = rng.normal(size=(8, 3))
    block[:, 1] = block[:, 0] + 0.1 * rng.normal(size=8)
    rho = np.corrcoef(block.T)
    off = rho[~np.eye(3, dtype=bool)]
    lam = min(1.0, 6 / (7 * (off**2).sum()))
    expected_sum = (1 - lam) * rho.sum() + lam * 3
    centered_total = block.sum(1) - block.sum(1).mean()
    np.testing.assert_allclose(adv(block, [0] * 8, shrinkage="auto").numpy(), centered_total / np.sqrt(expected_sum + 1e-6))


def test_batch_pooling_uses_one_matrix_for_all_groups():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(24, 3))
    ids = np.repeat(np.arange(6), 4)
    centered = np.concatenate([rewards[ids == g] - rewards[ids == g].mean(0) for g in range(6)])
    ordered = np.concatenate([rewards[ids == g] for g in range(6)])
    norms = np.sqrt((centered**2).sum(0))
    rho = (centered.T @ centered) / np.outer(norms, norms)  # correlation of the pooled centered rows
    totals = ordered.sum(1).reshape(6, 4)
    expected = (totals - totals.mean(1, keepdims=True)).reshape(-1) / np.sqrt(rho.sum() + 1e-6)
    np.testing.assert_allclose(adv(rewards, ids, pooling="batch").numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_defaults_reproduce_plain_corr_grpo_exactly(seed):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(40, 4)) * [1, 10, 100, 0.1]
    rewards[rng.random((40, 4)) < 0.1] = np.nan
    ids = rng.integers(0, 9, size=40)
    plain = adv(rewards, ids)
    explicit = adv(rewards, ids, shrinkage=0, pooling="group", min_corr_sum=None, numerator="raw")
    assert torch.equal(plain, explicit)
    np.testing.assert_allclose(plain.numpy(), reference.corr_grpo(rewards, list(ids)), rtol=1e-9, atol=1e-9)


@SETTINGS
@given(batches(), st.integers(0, 2), st.floats(0.1, 50), st.floats(-20, 20))
def test_standardized_numerator_is_affine_invariant(batch, k, a, b):
    rewards, ids = batch
    changed = rewards.clone()
    changed[:, k] = a * changed[:, k] + b
    before = adv(rewards, ids, numerator="standardized")
    after = adv(changed, ids, numerator="standardized")
    torch.testing.assert_close(before, after, rtol=1e-6, atol=1e-6)


def test_standardized_numerator_has_unit_in_group_std():
    rng = np.random.default_rng(1)
    rewards = rng.normal(size=(32, 3)) * [1, 100, 0.01]
    out = adv(rewards, np.repeat(np.arange(4), 8), numerator="standardized", eps=0.0)
    for g in range(4):
        assert out[g * 8 : (g + 1) * 8].std().item() == pytest.approx(1.0, rel=1e-9)


@SETTINGS
@given(batches(min_size=2, max_size=4), st.floats(0.05, 2.0), st.sampled_from(["raw", "standardized"]))
def test_floor_bound_holds_on_every_batch(batch, floor, numerator):
    rewards, ids = batch
    weights = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    out = adv(rewards, ids, weights=weights, min_corr_sum=floor, numerator=numerator)
    for g in ids.unique():
        rows = ids == g
        block = rewards[rows]
        size = int(rows.sum())
        if numerator == "raw":
            bound = ((block - block.mean(0)) @ weights).abs() / math.sqrt(floor + 1e-6)
            assert (out[rows].abs() <= bound + 1e-9).all()
        else:
            bound = weights.abs().sum() * (size - 1) / math.sqrt(size) / math.sqrt(floor + 1e-6)
            assert (out[rows].abs() <= bound + 1e-9).all()


@SETTINGS
@given(batches(min_size=2, max_size=4), st.floats(0.05, 1.0))
def test_shrinkage_bound_holds_on_every_batch(batch, lam):
    # Σρ' ≥ λ·k_active ≥ λ wherever the numerator is non-zero
    rewards, ids = batch
    out = adv(rewards, ids, shrinkage=lam)
    for g in ids.unique():
        rows = ids == g
        block = rewards[rows]
        bound = (block - block.mean(0)).sum(1).abs() / math.sqrt(lam + 1e-6)
        assert (out[rows].abs() <= bound + 1e-9).all()


@SETTINGS
@given(batches())
def test_sa_corr_grpo_with_gamma_zero_is_corr_grpo(batch):
    rewards, ids = batch
    ranges = [(-5.0, 5.0)] * 3
    torch.testing.assert_close(adv(rewards, ids, "sa_corr_grpo", reward_ranges=ranges, gamma=0.0), adv(rewards, ids))


def test_sa_corr_grpo_drops_a_saturated_component():
    # component 0 saturated at its top (mean 1 of range [0, 1]) -> coefficient 0: only component 1 counts
    rewards = [[1.0, 0.0], [1.0, 1.0], [1.0, 0.5], [1.0, 0.2]]
    out = adv(rewards, [0] * 4, "sa_corr_grpo", reward_ranges=[(0, 1), (0, 1)], gamma=1.0)
    s1 = np.mean([0.0, 1.0, 0.5, 0.2])
    centered = (np.array([0.0, 1.0, 0.5, 0.2]) - s1) * (1 - s1)
    np.testing.assert_allclose(out.numpy(), centered / np.sqrt(1 + 1e-6), rtol=1e-9)


def test_ema_state_round_trip_and_purity():
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(8), 4)
    state = None
    for step in range(3):
        rewards = rng.normal(size=(32, 3))
        a1, s1 = mrgrpo.corr_grpo_ema(rewards, ids, state, decay=0.5)
        a2, s2 = mrgrpo.corr_grpo_ema(rewards, ids, state, decay=0.5)
        assert torch.equal(a1, a2) and s1 == s2  # pure
        state = s1
    assert state["steps"] == 3
    corr = np.array(state["correlation"])
    assert np.allclose(np.diag(corr), 1.0)  # bias-corrected average of correlation matrices
    with pytest.raises(ValueError, match="decay"):
        mrgrpo.corr_grpo_ema(rewards, ids, state, decay=0.9)


def test_first_ema_step_equals_batch_pooling():
    rng = np.random.default_rng(2)
    rewards, ids = rng.normal(size=(24, 3)), np.repeat(np.arange(6), 4)
    ema, _ = mrgrpo.corr_grpo_ema(rewards, ids, None, decay=0.9)
    torch.testing.assert_close(ema, adv(rewards, ids, pooling="batch"))


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(shrinkage=1.5), "shrinkage"),
        (dict(shrinkage="max"), "shrinkage"),
        (dict(pooling="token"), "pooling"),
        (dict(min_corr_sum=-1), "min_corr_sum"),
        (dict(numerator="z"), "numerator"),
        (dict(correlation=[[1.0]]), "correlation"),
        (dict(correlation=np.eye(2)), "pooling='batch'"),
    ],
)
def test_bad_robust_options(options, message):
    with pytest.raises(ValueError, match=message):
        adv(DISAGREE, [0, 0], **options)


def test_diagnose_reports_corr_amplification():
    report = mrgrpo.diagnose(DISAGREE, [0, 0])
    assert report["corr_grpo"]["denominator_below_one"] == 1.0
    assert report["corr_grpo"]["max_amplification"] == pytest.approx(1000.0)
