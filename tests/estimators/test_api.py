"""compute_advantages: accepted inputs, dtypes/devices, NaN conventions, and every bad input."""

import numpy as np
import pytest
import torch

import mrgrpo

REWARDS = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.5]]


def test_lists_return_float32_and_numpy_keeps_its_dtype():
    assert mrgrpo.compute_advantages(REWARDS, [0, 0, 1, 1]).dtype == torch.float32
    assert mrgrpo.compute_advantages(np.array(REWARDS), [0, 0, 1, 1]).dtype == torch.float64
    half = torch.tensor(REWARDS, dtype=torch.bfloat16)
    assert mrgrpo.compute_advantages(half, [0, 0, 1, 1]).dtype == torch.bfloat16
    assert mrgrpo.compute_advantages(torch.tensor([[1], [0]]), [0, 0]).dtype == torch.float32


def test_group_ids_may_be_strings_tensors_or_numpy_and_non_contiguous():
    rewards = torch.tensor(REWARDS * 2, dtype=torch.float64)
    ints = [0, 1, 2, 3, 0, 1, 2, 3]
    expected = mrgrpo.compute_advantages(rewards, ints, "corr_grpo")
    for ids in (
        [f"uid-{i}" for i in ints],
        torch.tensor(ints),
        np.array(ints),
        np.array([f"u{i}" for i in ints], dtype=object),
        [(i, "x") for i in ints],
        [i + 100 for i in ints],
    ):
        torch.testing.assert_close(mrgrpo.compute_advantages(rewards, ids, "corr_grpo"), expected)


def test_unsorted_id_order_does_not_matter():
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    a = mrgrpo.compute_advantages(rewards, [5, 5, 3, 3], "grpo", scale="batch")
    b = mrgrpo.compute_advantages(rewards, [0, 0, 1, 1], "grpo", scale="batch")
    torch.testing.assert_close(a, b)


def test_all_nan_rollout_gets_zero_and_is_excluded_from_statistics():
    nan = float("nan")
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [nan, nan], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    ids = [0, 0, 0, 1, 1]
    for name in ["grpo", "gdpo", "corr_grpo", "dr_grpo"]:
        with_nan = mrgrpo.compute_advantages(rewards, ids, name)
        assert with_nan[2].item() == 0.0
        without = mrgrpo.compute_advantages(rewards[[0, 1, 3, 4]], [0, 0, 1, 1], name)
        torch.testing.assert_close(with_nan[[0, 1, 3, 4]], without)


def test_nan_component_is_ignored_by_that_components_group_statistics():
    nan = float("nan")
    # component 1 unscored for rollout 0: its group mean is over rollouts 1..2 only
    rewards = torch.tensor([[1.0, nan], [0.0, 2.0], [1.0, 4.0]], dtype=torch.float64)
    adv = mrgrpo.compute_advantages(rewards, [0, 0, 0], "gdpo", batch_norm=False, eps=0.0)
    z0 = np.array([1.0, 0.0, 1.0]) - 2 / 3
    z0 /= np.std([1.0, 0.0, 1.0], ddof=1)
    z1 = np.array([0.0, -1.0, 1.0]) / np.std([2.0, 4.0], ddof=1)
    np.testing.assert_allclose(adv.numpy(), z0 + z1, rtol=1e-12)


def test_result_stays_on_the_input_device_and_inputs_are_not_modified():
    rewards = torch.tensor(REWARDS)
    copy = rewards.clone()
    adv = mrgrpo.compute_advantages(rewards, [0, 0, 1, 1], "sa_mrpo", reward_ranges=[(0, 1), (0, 1)])
    assert adv.device == rewards.device
    assert torch.equal(rewards, copy)


def test_weights_scale_components():
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    a = mrgrpo.compute_advantages(rewards, [0, 0, 0, 0], "dr_grpo", weights=[2.0, 0.0])
    torch.testing.assert_close(a, 2 * (rewards[:, 0] - rewards[:, 0].mean()))


def test_empty_batch():
    assert mrgrpo.compute_advantages(torch.zeros(0, 3), [], "gdpo").shape == (0,)


BAD = [
    (dict(rewards=[1.0, 2.0], group_ids=[0, 0]), "2-D"),
    (dict(rewards=[[1.0, float("inf")], [0.0, 1.0]], group_ids=[0, 0]), "infinite"),
    (dict(rewards=[[1.0], [0.0]], group_ids=[0, 0, 0]), "one group id per rollout"),
    (dict(rewards=[[1.0], [0.0]], group_ids=[[0], [0]]), "hashable"),
    (dict(rewards=[[1.0], [0.0]], group_ids=torch.tensor([0.0, 0.0])), "floating-point"),
    (dict(rewards=[[1.0, 0.0]], group_ids=[0], weights=[1.0]), "one entry per reward component"),
    (dict(rewards=[[1.0, 0.0]], group_ids=[0], weights=[1.0, float("nan")]), "finite"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="ppo"), "available: constrained_grpo, corpo, corr_grpo"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="grpo", gamma=1.0), "no option"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="grpo", scale="token"), "scale must be one of"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="grpo", eps=-1), "eps must be"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="gdpo", ddof=0.5), "ddof must be"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="sa_mrpo"), "needs reward_ranges"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="sa_mrpo", reward_ranges=[(1, 1)]), "hi > lo"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="sa_mrpo", reward_ranges=[(0, 1), (0, 1)]), "pairs"),
    (dict(rewards=[[1.0]], group_ids=[0], estimator="sa_mrpo", reward_ranges=[(0, 1)], gamma=-1), "gamma"),
    (dict(rewards=[[1.0, None]], group_ids=[0]), "float('nan')"),
    (dict(rewards=np.array([["a"]]), group_ids=[0]), "numeric"),
]


@pytest.mark.parametrize("kwargs,message", BAD, ids=[m for _, m in BAD])
def test_bad_input_raises_a_value_error_naming_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mrgrpo.compute_advantages(**kwargs)


def test_register_estimator(monkeypatch):
    from mrgrpo.estimators import registry

    # Register into a copy of the registry so the toy estimator does not leak into other tests.
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @mrgrpo.register_estimator("test_rank_within_group")
    def rank(rewards, groups, weights, *, scale: float = 1.0):
        """Toy: weighted total minus group mean, times scale."""
        return mrgrpo.compute_advantages(rewards, groups.index, "dr_grpo", weights) * scale

    assert "test_rank_within_group" in mrgrpo.available_estimators()
    adv = mrgrpo.compute_advantages(REWARDS, [0, 0, 1, 1], "test_rank_within_group", scale=2.0)
    torch.testing.assert_close(adv, 2 * mrgrpo.compute_advantages(REWARDS, [0, 0, 1, 1], "dr_grpo"))
    with pytest.raises(ValueError, match="already registered"):
        mrgrpo.register_estimator("test_rank_within_group")(lambda r, g, w: r[:, 0])
    with pytest.raises(TypeError, match="must take"):
        mrgrpo.register_estimator("test_bad_signature")(lambda r: r)


def _batch_with(value, row, col, *, shuffled, dtype, groups=6, size=4, k=3):
    rng = np.random.default_rng(row * 7 + col)
    rewards = rng.random((groups * size, k)).astype(dtype)
    ids = np.repeat(np.arange(groups), size)
    if shuffled:
        perm = rng.permutation(len(ids))
        rewards, ids = rewards[perm], ids[perm]
    rewards[row, col] = value
    return torch.from_numpy(rewards), torch.from_numpy(ids)


SCREENED_LAYOUTS = [(shuffled, dtype) for shuffled in (True, False) for dtype in (np.float32, np.float64)]


@pytest.mark.parametrize("shuffled,dtype", SCREENED_LAYOUTS)
@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
@pytest.mark.parametrize("weights", [None, [1.0, 0.0, 2.0]], ids=["all weights", "zero weight"])
def test_every_estimator_names_the_first_infinite_reward_in_every_layout(shuffled, dtype, value, weights):
    # GRPO and Dr. GRPO fold this check into their weighted total (screens_rewards): a zero
    # weight, which hides its column from the total, must not hide an infinite value there.
    for name in mrgrpo.available_estimators():
        spec = mrgrpo.get_estimator(name)  # each runs with its registered example options (and ranges)
        options = {**spec.example_options, **({"reward_ranges": [(0, 1)] * 3} if spec.needs_ranges else {})}
        used = weights if spec.uses_weights else None
        rewards, ids = _batch_with(value, 5, 1, shuffled=shuffled, dtype=dtype)
        rewards[9, 2] = float("nan")  # a NaN elsewhere does not mask it
        with pytest.raises(ValueError, match=r"1 infinite value\(s\) \(first at row 5, component 1\)"):
            mrgrpo.compute_advantages(rewards, ids, name, used, **options)


@pytest.mark.parametrize("shuffled,dtype", SCREENED_LAYOUTS)
@pytest.mark.parametrize("weights", [None, [1.0, 0.0, 2.0]], ids=["all weights", "zero weight"])
@pytest.mark.parametrize("name,options", [("grpo", {}), ("dr_grpo", {}), ("grpo", {"eps": 0.0}), ("grpo", {"scale": "batch"})])
def test_unscored_rollouts_get_exact_zeros_and_leave_the_statistics_on_every_path(shuffled, dtype, weights, name, options):
    rewards, ids = _batch_with(float("nan"), 3, 0, shuffled=shuffled, dtype=dtype)
    rewards[3] = float("nan")
    got = mrgrpo.compute_advantages(rewards, ids, name, weights, **options)
    assert got[3].item() == 0.0
    kept = torch.arange(len(ids)) != 3
    alone = mrgrpo.compute_advantages(rewards[kept], ids[kept], name, weights, **options)
    torch.testing.assert_close(got[kept], alone)


def test_an_estimator_that_screens_its_own_rewards_receives_them_unchecked(monkeypatch):
    from mrgrpo.estimators import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    seen = []

    @mrgrpo.register_estimator("test_screens_itself", screens_rewards=True)
    def screens(rewards, groups, weights):
        seen.append(bool(torch.isinf(rewards).any()))
        registry.check_reward_values(rewards)
        return rewards[:, 0]

    @mrgrpo.register_estimator("test_screened")
    def screened(rewards, groups, weights):
        seen.append("called")
        return rewards[:, 0]

    bad = [[1.0, float("inf")], [0.0, 1.0]]
    with pytest.raises(ValueError, match="infinite"):
        mrgrpo.compute_advantages(bad, [0, 0], "test_screens_itself")
    with pytest.raises(ValueError, match="infinite"):
        mrgrpo.compute_advantages(bad, [0, 0], "test_screened")
    assert seen == [True]  # the default estimator was never called with an infinite reward
    assert registry.get_estimator("grpo").screens_rewards and registry.get_estimator("dr_grpo").screens_rewards
    assert not registry.get_estimator("gdpo").screens_rewards


def test_a_groups_object_is_reused_as_it_is_and_must_match_the_batch():
    from mrgrpo.estimators.groups import make_groups

    rewards = torch.tensor(REWARDS * 2, dtype=torch.float64)
    for ids in ([0, 0, 1, 1, 2, 2, 3, 3], [3, 1, 0, 2, 1, 3, 0, 2]):
        groups = make_groups(ids, 8)
        assert make_groups(groups, 8) is groups
        for name in ("grpo", "gdpo", "corr_grpo"):
            torch.testing.assert_close(
                mrgrpo.compute_advantages(rewards, groups, name), mrgrpo.compute_advantages(rewards, ids, name)
            )
        with pytest.raises(ValueError, match="the Groups given are for 8 rollouts but rewards has 4 rows"):
            mrgrpo.compute_advantages(rewards[:4], groups, "grpo")
    moved = make_groups(ids, 8).to("cpu")
    assert moved.num_groups == 4 and torch.equal(moved.index, make_groups(ids, 8).index)
