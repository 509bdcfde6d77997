"""Random reward batches with every edge the estimators must handle (shared by the test files
of the field's estimators): unequal group sizes, singleton groups, shuffled ids, a binary
component (many constant groups), a component constant in some groups, NaN entries and a few
fully unscored rollouts."""

import numpy as np
import pytest


def edge_batch(seed, k=4, contiguous=False, nan=True, n_groups=30, positive_weights=True):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, size=n_groups)
    sizes[:3] = 1  # singleton groups, always
    ids = np.repeat(np.arange(n_groups) * 7 + 3, sizes)  # ids that are not 0..G-1
    n = len(ids)
    rewards = rng.normal(size=(n, k)) * rng.uniform(0.1, 5, size=k) + rng.uniform(-2, 2, size=k)
    rewards[:, 0] = rng.integers(0, 2, size=n)  # binary: constant groups happen
    first = np.isin(ids, ids[np.cumsum(sizes)[:10] - 1])
    rewards[first, k - 1] = 0.25  # a component constant within ten groups
    if nan:
        rewards[rng.random((n, k)) < 0.1] = np.nan
        rewards[rng.random(n) < 0.03] = np.nan
    if not contiguous:
        perm = rng.permutation(n)
        rewards, ids = rewards[perm], ids[perm]
    low = 0.2 if positive_weights else -0.5
    weights = rng.uniform(low, 2, size=k)
    return rewards, ids, weights


@pytest.fixture
def make_batch():
    return edge_batch


def ddca_edge_batch(seed, contiguous=False, nan=True):
    """An edge batch as ddca reads it: correctness scores (some graded: correct means > 0.5),
    lengths in tokens (some repeated, some unscored), and a third component; no weights."""
    rewards, ids, _ = edge_batch(seed, k=3, contiguous=contiguous, nan=nan)
    rng = np.random.default_rng(seed + 100)
    soft = rng.random(len(ids)) < 0.2
    rewards[soft, 0] = rng.choice([0.3, 0.5, 0.7], size=int(soft.sum()))  # graded scores: correct means > 0.5
    rewards[:, 1] = np.round(np.abs(rewards[:, 1]) * 100 + 5)  # lengths in tokens
    rewards[rng.random(len(ids)) < 0.1, 1] = 321.0  # repeated lengths
    if nan:
        rewards[rng.random(len(ids)) < 0.08, 1] = np.nan
    return rewards, ids


@pytest.fixture
def make_ddca_batch():
    return ddca_edge_batch


def relative_error(ours, expected):
    """Max |ours − expected| relative to the largest |expected| (absolute if that is 0)."""
    ours = np.asarray(ours, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    scale = (float(np.abs(expected).max()) or 1.0) if expected.size else 1.0
    return float(np.abs(ours - expected).max() / scale) if expected.size else 0.0


@pytest.fixture
def rel_error():
    return relative_error
