"""ddca (DDCA, arXiv 2602.02099): worked example, roles, errors, beta = 0 (its per-group loop parity: test_reference_parity.py)."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference
from mrgrpo.estimators.registry import validate_options


def test_worked_example():
    # One group of G = 4: correct = [1, 1, 1, 0], lengths [100, 200, 300, 50]; n = 3.
    # A_acc: mean 0.75, population std sqrt(0.75 * 0.25) = 0.4330127
    #   -> [0.25, 0.25, 0.25, -0.75] / (0.4330127 + 1e-8) = [0.577350, 0.577350, 0.577350, -1.732051].
    # Correct lengths [100, 200, 300]: mean 200, population std sqrt(20000/3) = 81.649658
    #   -> z = [-1.224745, 0, 1.224745], s = sigmoid(z) = [0.227103, 0.5, 0.772897], mean s = 0.5.
    # A_len = -(s - 0.5) * n/G = [0.272897, 0, -0.272897] * 0.75 = [0.204673, 0, -0.204673]; wrong: 0.
    # A = A_acc + 0.2 A_len = [0.618285, 0.577350, 0.536416, -1.732051]: the shortest correct answer gains most.
    rewards = torch.tensor([[1.0, 100.0], [1.0, 200.0], [1.0, 300.0], [0.0, 50.0]], dtype=torch.float64)
    got = mrgrpo.compute_advantages(rewards, [0, 0, 0, 0], "ddca")
    torch.testing.assert_close(got, torch.tensor([0.618285, 0.577350, 0.536416, -1.732051], dtype=torch.float64), atol=1e-6, rtol=0)


def test_roles_by_index_or_name_and_other_components_ignored(make_ddca_batch):
    rewards, ids = make_ddca_batch(4, nan=False)
    r = torch.from_numpy(rewards)
    base = mrgrpo.compute_advantages(r[:, :2], ids, "ddca")
    swapped = torch.stack([r[:, 2], r[:, 1], r[:, 0]], dim=1)  # correctness last, an extra column first
    # Names resolve against the suite's component names (the trainers and the CLI run this).
    options = validate_options("ddca", {"correctness": "correct", "length": "tokens"}, component_names=["extra", "tokens", "correct"])
    assert options == {"correctness": 2, "length": 1}
    by_name = mrgrpo.compute_advantages(swapped, ids, "ddca", **options)
    by_index = mrgrpo.compute_advantages(swapped, ids, "ddca", correctness=2, length=1)
    assert torch.equal(by_name, base) and torch.equal(by_index, base)


def test_beta_zero_is_the_accuracy_zscore(make_ddca_batch):
    rewards, ids = make_ddca_batch(5, nan=False)
    got = mrgrpo.compute_advantages(torch.from_numpy(rewards), ids, "ddca", beta=0.0).numpy()
    correct = (rewards[:, 0] > 0.5).astype(np.float64)
    expected = np.zeros(len(ids))
    for gid in np.unique(ids):
        rows = ids == gid
        c = correct[rows]
        expected[rows] = (c - c.mean()) / (max(c.std(), 1e-8) + 1e-8)
    np.testing.assert_allclose(got, expected, atol=1e-12, rtol=0)


def test_unscored_correctness_leaves_the_group_and_gets_zero():
    nan = float("nan")
    rewards = torch.tensor([[1.0, 10.0], [0.0, 20.0], [nan, 30.0]], dtype=torch.float64)
    got = mrgrpo.compute_advantages(rewards, [0, 0, 0], "ddca")
    alone = mrgrpo.compute_advantages(rewards[:2], [0, 0], "ddca")
    assert got[2].item() == 0.0 and torch.equal(got[:2], alone)


def test_groups_of_one_and_all_correct_equal_lengths_give_zero():
    rewards = torch.tensor([[1.0, 10.0], [1.0, 30.0], [1.0, 30.0], [0.0, 5.0], [0.0, 9.0]], dtype=torch.float64)
    assert mrgrpo.compute_advantages(rewards, [0, 1, 1, 2, 2], "ddca").tolist() == [0.0] * 5


@pytest.mark.parametrize(
    "options,weights,message",
    [
        ({"correctness": 0, "length": 0}, None, "the same component"),
        ({"correctness": "correct"}, None, "give its 0-based index"),
        ({"length": 5}, None, "not a component index"),
        ({"beta": "x"}, None, "beta must be a number"),
        ({}, [1.0, 1.0, 0.5], "does not use the weights"),
    ],
)
def test_bad_options_raise_one_line(options, weights, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0, 2.0, 0.0], [0.0, 1.0, 0.0]], [0, 0], "ddca", weights, **options)
    assert "\n" not in str(error.value)


def test_an_unknown_component_name_is_refused():
    with pytest.raises(ConfigError, match="is not a component"):
        validate_options("ddca", {"correctness": "nope"}, component_names=["a", "b", "c"])


def test_zero_weights_on_ignored_components_are_accepted():
    rewards = [[1.0, 2.0, 0.0], [0.0, 1.0, 0.0]]
    base = mrgrpo.compute_advantages(rewards, [0, 0], "ddca")
    assert torch.equal(mrgrpo.compute_advantages(rewards, [0, 0], "ddca", [1.0, 1.0, 0.0]), base)
