"""corpo (CoRPO, arXiv 2511.04439): worked example, errors, identity with dr_grpo (its per-group loop parity: test_reference_parity.py)."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference


def test_worked_example():
    # threshold 0.5, one component:
    # group a, T = [0.2, 0.4]: mean 0.3 < 0.5 -> baseline 0.5 -> A = [-0.3, -0.1] (no failing answer gains)
    # group b, T = [0.6, 1.0]: mean 0.8 > 0.5 -> baseline 0.8 -> A = [-0.2, 0.2] (GRPO's centering)
    # group c, one rollout T = 0.9: baseline max(0.9, 0.5) = 0.9 -> A = 0
    # group d, one rollout T = 0.1: baseline max(0.1, 0.5) = 0.5 -> A = -0.4 (the threshold is its baseline)
    # group e, constant T = [0.3, 0.3]: baseline 0.5 -> A = [-0.2, -0.2]
    rewards = torch.tensor([[0.2], [0.6], [0.4], [1.0], [0.9], [0.1], [0.3], [0.3]], dtype=torch.float64)
    ids = ["a", "b", "a", "b", "c", "d", "e", "e"]
    got = mrgrpo.compute_advantages(rewards, ids, "corpo", threshold=0.5)
    torch.testing.assert_close(got, torch.tensor([-0.3, -0.2, -0.1, 0.2, 0.0, -0.4, -0.2, -0.2], dtype=torch.float64))


def test_weighted_total_and_unscored_rollouts():
    # T = r1 + 2 r2 (NaN counts 0): group [T = 1, 3, (unscored)] -> mean 2 >= threshold 1 -> A = [-1, 1, 0]
    nan = float("nan")
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [nan, nan]], dtype=torch.float64)
    got = mrgrpo.compute_advantages(rewards, [0, 0, 0], "corpo", [1.0, 2.0], threshold=1.0)
    assert got.tolist() == [-1.0, 1.0, 0.0]


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_minus_infinity_threshold_is_dr_grpo(make_batch, contiguous, dtype):
    rewards, ids, weights = make_batch(11, contiguous=contiguous)
    r = torch.from_numpy(rewards).to(dtype)
    ours = mrgrpo.compute_advantages(r, ids, "corpo", weights, threshold=float("-inf"))
    assert torch.equal(ours, mrgrpo.compute_advantages(r, ids, "dr_grpo", weights))


def test_a_threshold_below_every_mean_is_dr_grpo(make_batch):
    rewards, ids, weights = make_batch(12)
    r = torch.from_numpy(rewards)
    ours = mrgrpo.compute_advantages(r, ids, "corpo", weights, threshold=-1e6)
    torch.testing.assert_close(ours, mrgrpo.compute_advantages(r, ids, "dr_grpo", weights), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "options,message",
    [({}, r"corpo needs option\(s\) \['threshold'\], e.g. threshold=0.5"), ({"threshold": float("inf")}, "finite or -inf"), ({"threshold": "high"}, "must be a number"),
     ({"threshold": float("nan")}, "must be a number")],
)
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0], [2.0]], [0, 0], "corpo", **options)
    assert "\n" not in str(error.value)
