"""mo_grpo (MO-GRPO, arXiv 2509.22047): worked example, errors, identity with gdpo (its per-group loop parity: test_reference_parity.py)."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference

OPTIONS = [{}, {"eps": 0.0, "ddof": 0}, {"eps": 1e-3, "ddof": 1}]


def test_worked_example():
    # One group of 4, population std, eps = 0, weights (1, 0.5).
    # r1 = [0, 0, 1, 1]: mean 0.5, std 0.5 -> z1 = [-1, -1, 1, 1].
    # r2 = [1, 2, 3, 4]: mean 2.5, var (2.25 + 0.25 + 0.25 + 2.25)/4 = 1.25, std 1.118034
    #   -> z2 = [-1.5, -0.5, 0.5, 1.5]/1.118034 = [-1.341641, -0.447214, 0.447214, 1.341641].
    # A = z1 + 0.5 z2 = [-1.670820, -1.223607, 1.223607, 1.670820] (no batch normalization).
    rewards = torch.tensor([[0.0, 1.0], [0.0, 2.0], [1.0, 3.0], [1.0, 4.0]], dtype=torch.float64)
    got = mrgrpo.compute_advantages(rewards, [0, 0, 0, 0], "mo_grpo", [1.0, 0.5], eps=0.0, ddof=0)
    torch.testing.assert_close(got, torch.tensor([-1.670820, -1.223607, 1.223607, 1.670820], dtype=torch.float64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("options", OPTIONS)
def test_is_gdpo_without_its_batch_step(make_batch, options):
    rewards, ids, weights = make_batch(7)
    r = torch.from_numpy(rewards)
    ours = mrgrpo.compute_advantages(r, ids, "mo_grpo", weights, **options)
    gdpo = mrgrpo.compute_advantages(r, ids, "gdpo", weights, batch_norm=False, **options)
    torch.testing.assert_close(ours, gdpo, atol=1e-12, rtol=0)


def test_singleton_and_constant_groups_give_exact_zeros():
    rewards = torch.tensor([[1.0, 2.0], [3.0, 3.0], [3.0, 3.0], [5.0, float("nan")]], dtype=torch.float64)
    got = mrgrpo.compute_advantages(rewards, [0, 1, 1, 2], "mo_grpo")
    assert got.tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("options,message", [({"eps": -1.0}, "eps must be"), ({"ddof": -1}, "ddof must be"), ({"ddof": 1.5}, "ddof must be")])
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0, 2.0], [2.0, 1.0]], [0, 0], "mo_grpo", **options)
    assert "\n" not in str(error.value)
