"""constrained_grpo (Lagrangian constrained GRPO, arXiv 2602.05863): worked
example, the multiplier update and its state, errors (its per-group loop parity: test_reference_parity.py)."""

import json

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference
from mrgrpo.estimators.constrained_grpo import cost_means, update_multipliers
from mrgrpo.estimators.registry import compute_advantages_with_state, validate_options

REWARDS = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)


def test_worked_example():
    # One group of 4, unbiased std, eps = 0; reward r = [0, 1, 1, 0], cost c = [1, 0, 1, 0], λ = 0.5.
    # Z_R = [-0.866025, 0.866025, 0.866025, -0.866025] (mean 0.5, std sqrt(1/3));
    # Z_c = [0.866025, -0.866025, 0.866025, -0.866025];
    # A = Z_R - 0.5 Z_c = [-1.299038, 1.299038, 0.433013, -0.433013]: the costly success gains less.
    got, state = compute_advantages_with_state(
        REWARDS, [0] * 4, "constrained_grpo", state={"multipliers": [0.5]}, constraints=1, limits=0.2, lr=0.1, eps=0.0
    )
    torch.testing.assert_close(got, torch.tensor([-1.299038, 1.299038, 0.433013, -0.433013], dtype=torch.float64), atol=1e-6, rtol=0)
    # Update: mean_batch c = 0.5 > limit 0.2 -> λ = 0.5 + 0.1 * 0.3 = 0.53; a limit of 0.7 -> max(0, 0 - 0.02) = 0.
    assert state["multipliers"] == pytest.approx([0.53]) and state["lambda"] == {"1": pytest.approx(0.53)}
    assert state["cost_mean"] == {"1": 0.5} and state["violation"] == {"1": pytest.approx(0.3)} and state["steps"] == 1
    assert update_multipliers([0.0], [0.5], [0.7], lr=0.1) == [0.0]


def test_zero_multipliers_give_grpo_on_the_reward_components(make_batch):
    rewards, ids, weights = make_batch(3)
    weights[2] = 1.0
    r = torch.from_numpy(rewards)
    ours = mrgrpo.compute_advantages(r, ids, "constrained_grpo", weights, constraints=[2], limits=[0.0])  # init 0
    keep = [0, 1, 3]
    torch.testing.assert_close(ours, mrgrpo.compute_advantages(r[:, keep], ids, "grpo", weights[keep]), atol=1e-12, rtol=0)


def test_update_matches_the_loop_and_skips_unscored_costs(make_batch):
    rewards, ids, _ = make_batch(4)
    means = cost_means(torch.from_numpy(rewards), [1, 3])
    got = update_multipliers([0.3, 0.0], means, [0.2, -0.5], lr=0.05)
    assert got == pytest.approx(reference.update_multipliers([0.3, 0.0], rewards, [1, 3], [0.2, -0.5], 0.05), abs=1e-12)
    unscored = torch.tensor([[1.0, float("nan")], [0.0, float("nan")]], dtype=torch.float64)
    _, state = compute_advantages_with_state(unscored, [0, 0], "constrained_grpo", state={"multipliers": [0.4]}, constraints=1, limits=0.0, lr=1.0)
    assert state["multipliers"] == [0.4] and state["cost_mean"] == {"1": None} and state["violation"] == {"1": None}


def test_state_is_carried_over_steps_and_names_resolve():
    options = validate_options("constrained_grpo", {"constraints": ["cost"], "limits": [0.2], "lr": 0.5, "init": 0.1},
                               component_names=["correct", "cost"])
    assert options["constraints"] == [1]
    state, lambdas, incoming = None, [], []
    for _ in range(3):
        incoming.append(0.1 if state is None else state["multipliers"][0])
        advantages, state = compute_advantages_with_state(REWARDS, [0] * 4, "constrained_grpo", state=state, **options)
        lambdas.append(state["multipliers"][0])
        assert json.loads(json.dumps(state)) == state
    # mean cost 0.5, violation 0.3 every step: λ = 0.1 + 0.15 t.
    assert lambdas == pytest.approx([0.25, 0.40, 0.55]) and state["steps"] == 3
    # Each step's advantages use the incoming multipliers (the last one: λ = 0.40).
    expected = reference.constrained_grpo(REWARDS.numpy(), [0] * 4, constraints=[1], multipliers=[incoming[-1]])
    np.testing.assert_allclose(advantages.numpy(), expected, atol=1e-12)
    # compute_advantages runs the first step (λ = init).
    first = mrgrpo.compute_advantages(REWARDS, [0] * 4, "constrained_grpo", **options)
    np.testing.assert_allclose(first.numpy(), reference.constrained_grpo(REWARDS.numpy(), [0] * 4, constraints=[1], multipliers=[0.1]), atol=1e-12)


@pytest.mark.parametrize(
    "options,weights,message",
    [
        ({"limits": [0.1]}, None, r"needs option\(s\) \['constraints'\]"),
        ({"constraints": [1]}, None, r"needs option\(s\) \['limits'\]"),
        ({"constraints": [1], "limits": [0.1, 0.2]}, None, "limits must be a number or 1 numbers"),
        ({"constraints": [1, 1], "limits": 0.1}, None, "names a component twice"),
        ({"constraints": ["cost"], "limits": 0.1}, None, "give its 0-based index"),
        ({"constraints": [1], "limits": 0.1, "multipliers": [1.0]}, None, "has no option"),
        ({"constraints": [1], "limits": 0.1, "init": -0.5}, None, "init must be in"),
        ({"constraints": [1], "limits": 0.1, "lr": -0.1}, None, "lr must be in"),
        ({"constraints": [7], "limits": 0.1}, None, "not a component index"),
        ({"constraints": [1], "limits": 0.1}, [1.0, 2.0], "does not use the weights"),
    ],
)
def test_bad_options_raise_one_line(options, weights, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages(REWARDS, [0] * 4, "constrained_grpo", weights, **options)
    assert "\n" not in str(error.value)


def test_a_state_for_other_constraints_is_refused():
    _, state = compute_advantages_with_state(REWARDS, [0] * 4, "constrained_grpo", constraints=[1], limits=[0.2])
    with pytest.raises(ConfigError, match="has 1 multipliers but constraints=\\[0, 1\\] has 2") as error:
        compute_advantages_with_state(REWARDS, [0] * 4, "constrained_grpo", state=state, constraints=[0, 1], limits=[0.2, 0.2])
    assert "\n" not in str(error.value)
