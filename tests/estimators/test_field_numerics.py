"""The field's estimators over the whole float64 range: scale-free forms (eps = 0, delta = 0)
give the same advantages for every power-of-ten scale of the rewards, and every result is
finite (no finite input overflows or underflows)."""

import numpy as np
import pytest
import torch

import mrgrpo

SCALE_FREE = {
    "mo_grpo": {"eps": 0.0},
    "dvao": {"eps": 0.0},
    "gd2po": {"eps": 0.0},
    "saw": {"eps": 0.0, "delta": 0.0},
    "saw ": {"eps": 0.0, "delta": 0.0, "mode": "gdpo"},
    "constrained_grpo": {"eps": 0.0, "constraints": [2], "limits": [0.0], "init": 0.7},
    "rvpo": {"eps": 0.0},
    "rvpo ": {"eps": 0.0, "kappa": 0.0},
}


def batch(seed=0, groups=40, g=5):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(groups * g, 3)) + [0.0, 3.0, -1.0]
    rewards[:, 0] = rng.integers(0, 2, size=groups * g)
    ids = rng.permutation(np.repeat(np.arange(groups), g))
    return torch.from_numpy(rewards), ids


@pytest.mark.parametrize("scale", [1e-250, 1e-150, 1e-30, 1e30, 1e150, 1e250])
@pytest.mark.parametrize("name", sorted(SCALE_FREE))
def test_scale_free_forms_are_exact_over_the_float64_range(name, scale):
    rewards, ids = batch()
    options = SCALE_FREE[name]
    base = mrgrpo.compute_advantages(rewards, ids, name.strip(), **options)
    scaled = mrgrpo.compute_advantages(rewards * scale, ids, name.strip(), **options)
    assert bool(torch.isfinite(scaled).all())
    torch.testing.assert_close(scaled, base, atol=1e-9, rtol=0)


@pytest.mark.parametrize("scale", [1e-250, 1e250])
def test_corpo_is_homogeneous(scale):
    rewards, ids = batch(1)
    base = mrgrpo.compute_advantages(rewards, ids, "corpo", threshold=0.5)
    scaled = mrgrpo.compute_advantages(rewards * scale, ids, "corpo", threshold=0.5 * scale)
    torch.testing.assert_close(scaled / scale, base, atol=1e-9, rtol=0)


def test_ddca_ignores_the_scale_of_large_lengths():
    # (the official 1e-8 floor and eps on the length std are absolute, so tiny lengths are not
    # scale-free, and at scale 1 the eps moves the result by ~1e-8)
    rewards, ids = batch(1)
    rewards[:, 1] = rewards[:, 1].abs() + 1
    huge = rewards.clone()
    huge[:, 1] *= 1e250
    torch.testing.assert_close(
        mrgrpo.compute_advantages(huge, ids, "ddca"), mrgrpo.compute_advantages(rewards, ids, "ddca"), atol=1e-7, rtol=0
    )
