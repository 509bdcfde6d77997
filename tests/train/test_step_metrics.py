"""The trainer's per-step reward and advantage metrics: the same numbers as numpy's own
reductions (the trainer computes them in fewer calls), bit for bit, NaN and empty batches included."""

import numpy as np
import pytest

pytest.importorskip("trl")

from mrgrpo.train.trainer import advantage_stats, reward_means  # noqa: E402


def reference_rewards(v, w):
    present = ~np.isnan(v)
    filled = np.where(present, v, 0.0)
    count = present.sum(axis=0)
    means = (filled.sum(axis=0) / np.maximum(count, 1)).tolist()
    totals = filled[present.any(axis=1)] @ w
    return [m if c else float("nan") for c, m in zip(count.tolist(), means)], (
        float(totals.mean()) if totals.size else float("nan")
    )


def reference_advantages(a):
    if not a.size:
        return (float("nan"),) * 6
    magnitude = np.abs(a)
    std = float(a.std(ddof=1)) if a.size > 1 else 0.0
    tolerance = 1e-6 * max(1.0, float(magnitude.max()))
    return (float(a.mean()), std, float(magnitude.mean()), float(a.min()), float(a.max()),
            float((magnitude <= tolerance).mean()))


def bits(values):
    return np.asarray(values, dtype=np.float64).tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_metrics_equal_numpy_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.choice([0, 1, 2, 7, 8, 9, 33, 130, 300]))
        k = int(rng.integers(1, 5))
        v = (rng.normal(size=(n, k)) * 10.0 ** rng.uniform(-6, 6)).astype(np.float32).astype(np.float64)
        if rng.random() < 0.4 and n:
            v[rng.random(size=(n, k)) < rng.uniform(0, 1)] = np.nan
        if rng.random() < 0.2:
            v = np.asfortranarray(v)
        w = rng.normal(size=k)
        a = rng.normal(size=n)
        if n:
            a[rng.random(size=n) < 0.3] = 0.0
            a[rng.random(size=n) < 0.1] = 5e-9
        means, total = reward_means(v, w)
        ref_means, ref_total = reference_rewards(v, w)
        assert bits(means) == bits(ref_means) and bits([total]) == bits([ref_total])
        assert bits(advantage_stats(a)) == bits(reference_advantages(a))


def test_unscored_component_and_empty_batch_are_nan():
    v = np.array([[1.0, np.nan], [3.0, np.nan]])
    means, total = reward_means(v, np.array([1.0, 2.0]))
    assert means[0] == 2.0 and np.isnan(means[1]) and total == 2.0
    means, total = reward_means(np.zeros((0, 2)), np.ones(2))
    assert all(np.isnan(means)) and np.isnan(total)
    assert advantage_stats(np.array([0.5])) == (0.5, 0.0, 0.5, 0.5, 0.5, 0.0)


def test_a_constant_groups_float32_residue_counts_as_zero():
    import torch

    from mrgrpo.estimators import compute_advantages

    # group 0 constant: its advantages are 0 before the batch step; a float32 batch whitening
    # leaves a residue of ~1e-8 there, which frac_zero must still count (it read 0 before)
    rewards = torch.tensor([[1.0], [1.0], [1.0], [1.0], [0.3], [0.9], [0.1], [0.7]], dtype=torch.float32)
    advantages = compute_advantages(rewards, torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), "gdpo").double().numpy()
    assert np.abs(advantages[:4]).max() < 1e-6
    assert advantage_stats(advantages)[5] == 0.5
    assert advantage_stats(np.array([3e-7, -3e-6, 2.0]))[5] == 1 / 3  # relative to the largest |a| (2.0)
