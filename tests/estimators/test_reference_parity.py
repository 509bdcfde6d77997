"""Every registered estimator equals its per-group loop oracle (:mod:`mrgrpo.estimators.reference`),
and ``grpo``/``gdpo`` equal TRL 1.16's own formulas.

The parity test is one parametrization over the registry: an estimator registered later (a new
module, or a user's ``@mrgrpo.register_estimator``) is checked with its ``example_options`` on the
edge batch as soon as its loop is in ``reference.REFERENCES``, with no edit here; ``CASES`` adds
option rows (and batches) for the estimators that need more. A registered estimator without a
loop fails, naming what to add.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.estimators import reference
from mrgrpo.estimators.registry import compute_advantages_with_state

OLD_SIX = ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo", "sa_corr_grpo"]


def random_batch(seed, n_groups=40, k=4, nan_fraction=0.1, contiguous=False):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, size=n_groups)
    ids = np.repeat(np.arange(n_groups), sizes)
    if not contiguous:
        ids = rng.permutation(ids)
    n = len(ids)
    rewards = rng.normal(size=(n, k)) * rng.uniform(0.1, 20, size=k)
    rewards[:, 0] = rng.integers(0, 2, size=n)  # a binary reward: many constant groups
    rewards[rng.random((n, k)) < nan_fraction] = np.nan
    rewards[rng.random(n) < 0.03] = np.nan  # a few fully unscored rollouts
    weights = rng.uniform(-0.5, 2, size=k)
    return rewards, ids, weights


BATCHES: dict[str, Callable[..., Any]] = {
    # name -> (builders: the conftest's make_batch / make_ddca_batch, seed, contiguous, nan) -> (rewards, ids, weights or None)
    "edge": lambda make, seed, contiguous, nan: make.edge(seed, contiguous=contiguous, nan=nan),
    "edge_signed": lambda make, seed, contiguous, nan: make.edge(seed, contiguous=contiguous, nan=nan, positive_weights=False),
    "ddca": lambda make, seed, contiguous, nan: (*make.ddca(seed, contiguous, nan), None),
    "random": lambda make, seed, contiguous, nan: random_batch(seed, contiguous=contiguous),
}
F64, F32 = torch.float64, torch.float32
SEEDS = ((0, True), (1, True), (2, True))


@dataclass(frozen=True)
class Case:
    """One option row: the batch it runs on, the seeds (with or without NaN), the dtypes, and how
    close it must be (``rel``: max error relative to the largest |advantage|, 1e-12 in float64 and
    1e-6 in float32; ``allclose``: rtol = atol = 1e-9)."""

    options: dict[str, Any] = field(default_factory=dict)
    batch: str = "edge"
    seeds: tuple[tuple[int, bool], ...] = SEEDS
    dtypes: tuple[torch.dtype, ...] = (F64, F32)
    tolerance: str = "rel"
    state: dict[str, Any] | None = None  # the state the estimator resumes from
    loop_options: dict[str, Any] = field(default_factory=dict)  # what the loop takes instead of the state
    unit_weights_at: tuple[int, ...] = ()  # components whose weight must be 1 (a cost's)
    zero_weights_at: tuple[int, ...] = ()  # components given weight 0 (they must take no part)


def _constrained(options, multipliers):
    costs = options["constraints"] if isinstance(options["constraints"], list) else [options["constraints"]]
    state = None if multipliers is None else {"multipliers": multipliers, "steps": 4}
    return Case(options, "edge_signed", state=state, loop_options={"multipliers": multipliers}, unit_weights_at=tuple(costs))


CASES: dict[str, list[Case]] = {
    **{name: [Case({}, "random", tuple((s, True) for s in range(4)), (F64,), "allclose")] for name in OLD_SIX},
    "corpo": [Case({"threshold": t}, "edge_signed") for t in (-1.0, 0.5, 3.0)],
    "ddca": [Case({"beta": beta}, "ddca") for beta in (0.2, 0.0, 1.5)],
    "dvao": [Case(o) for o in ({}, {"eps": 0.0, "ddof": 0}, {"eps": 1e-2, "ddof": 1})],
    "gd2po": [Case(o, "edge_signed") for o in ({}, {"mode": "hard"}, {"mode": "snr", "tau": 0.3}, {"tau": 2.0},
                                                 {"eps": 1e-4, "ddof": 0})],
    # rvpo: a component of weight 0 takes no part in the soft-min
    "rvpo": [Case(o, zero_weights_at=(1,)) for o in ({}, {"kappa": 0.0}, {"kappa": 5.0}, {"kappa": 0.05},
                                                     {"kappa": -1.0, "eps": 1e-4, "ddof": 0}, {"kappa": 1e3})],
    "gdpo_loo": [Case(o, "edge_signed") for o in ({}, {"leave_one_out": False}, {"eps": 0.0}, {"batch_norm": False},
                                                  {"leave_one_out": False, "eps": 1e-3})],
    "mo_grpo": [Case(o, "edge_signed") for o in ({}, {"eps": 0.0, "ddof": 0}, {"eps": 1e-3, "ddof": 1})],
    "saw": [Case(o, "edge_signed", ((0, True), (1, True), (2, False), (3, False))) for o in (
        {},
        {"mode": "gdpo"},
        {"reward_mins": [-3.0, 0.0, -5.0, -1.0], "eps": 1e-6},
        {"mode": "gdpo", "reward_mins": [-3.0, 0.0, -5.0, -1.0], "eps": 1e-6, "delta": 0.0},
        {"ddof": 0, "eps": 0.0},
    )],
    "constrained_grpo": [_constrained(o, m) for o, m in (
        ({"constraints": [3], "limits": [0.1]}, [0.7]),
        ({"constraints": [1, 3], "limits": [0.0, 0.5], "eps": 0.0, "ddof": 0}, [0.2, 1.5]),
        ({"constraints": 0, "limits": 0.5, "init": 2.0}, None),
        ({"constraints": [0, 1, 2, 3], "limits": 0.0}, [1.0, 0.5, 0.25, 0.0]),
    )],
}


def cases_of(name: str) -> list[Case]:
    """``CASES[name]``, else the estimator's ``example_options`` on the edge batch."""
    return CASES.get(name) or [Case(dict(mrgrpo.get_estimator(name).example_options))]


def check_parity(name, case, seed, nan, contiguous, dtype, make, rel_error):
    """``name``'s vectorized advantages against its loop in ``reference.REFERENCES`` on one batch."""
    loop = reference.REFERENCES.get(name)
    assert loop is not None, (
        f"{name} has no per-group loop oracle: add one to mrgrpo.estimators.reference.REFERENCES "
        "(a plain numpy loop over the groups, as the others are)"
    )
    rewards, ids, weights = BATCHES[case.batch](make, seed, contiguous, nan)
    options = dict(case.options)
    if mrgrpo.get_estimator(name).needs_ranges and "reward_ranges" not in options:
        options["reward_ranges"] = [(-30.0, 30.0)] * rewards.shape[1]
    if case.unit_weights_at:
        weights[list(case.unit_weights_at)] = 1.0
    if case.zero_weights_at:
        weights[list(case.zero_weights_at)] = 0.0
    rewards = rewards.astype(np.float32 if dtype == F32 else np.float64)
    ours, _ = compute_advantages_with_state(torch.from_numpy(rewards), ids, name, weights, state=case.state, **options)
    assert ours.dtype == dtype and bool(torch.isfinite(ours).all())
    extra = {"weights": weights} if weights is not None else {}
    expected = loop(rewards.astype(np.float64), list(ids), **extra, **options, **case.loop_options)
    if case.tolerance == "allclose":
        np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-9, atol=1e-9)
    else:
        assert rel_error(ours, expected) <= (1e-6 if dtype == F32 else 1e-12)


PARITY = [
    pytest.param(name, i, seed, nan, contiguous, dtype, id=f"{name}-{i}-{seed}-{'nan' if nan else 'full'}-"
                 f"{'contiguous' if contiguous else 'shuffled'}-{str(dtype).removeprefix('torch.')}")
    for name in mrgrpo.available_estimators()
    for i, case in enumerate(cases_of(name))
    for seed, nan in case.seeds
    for contiguous in (False, True)
    for dtype in case.dtypes
]


@pytest.mark.parametrize("name, case_index, seed, nan, contiguous, dtype", PARITY)
def test_every_registered_estimator_equals_its_per_group_loop(name, case_index, seed, nan, contiguous, dtype,
                                                               make_batch, make_ddca_batch, rel_error):
    make = SimpleNamespace(edge=make_batch, ddca=make_ddca_batch)
    check_parity(name, cases_of(name)[case_index], seed, nan, contiguous, dtype, make, rel_error)


def test_every_registered_estimator_is_in_the_parity_table():
    assert {p.values[0] for p in PARITY} == set(mrgrpo.available_estimators())
    assert set(CASES) <= set(mrgrpo.available_estimators())


def test_a_user_registered_estimator_gets_the_parity_check(monkeypatch, make_batch, rel_error):
    make = SimpleNamespace(edge=make_batch)
    # What a user does: register an estimator and its loop; the same check runs on it unchanged.
    from mrgrpo.estimators import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(reference, "REFERENCES", dict(reference.REFERENCES))

    @mrgrpo.register_estimator("test_group_max_gap", example_options={"floor": 0.0})
    def group_max_gap(rewards, groups, weights, *, floor: float = 0.0):
        """Total minus the group's best total (never above 0), floored."""
        total = (torch.nan_to_num(rewards) * weights).sum(dim=1)
        best = torch.full((groups.num_groups,), -torch.inf, dtype=total.dtype).scatter_reduce(
            0, groups.index, total, reduce="amax")
        return torch.clamp(total - best[groups.index], min=-1e9) + floor

    def loop(rewards, group_ids, weights=None, floor=0.0):
        weights = np.ones(rewards.shape[1]) if weights is None else np.asarray(weights)
        total = (np.nan_to_num(rewards) * weights).sum(axis=1)
        out = np.zeros(len(group_ids))
        for rows in reference.rows_by_group(group_ids).values():
            out[rows] = total[rows] - total[rows].max() + floor
        out[np.isnan(rewards).all(axis=1)] = 0.0  # the registry's rule: a rollout with no score gets 0
        return out

    reference.REFERENCES["test_group_max_gap"] = loop
    assert "test_group_max_gap" not in CASES and cases_of("test_group_max_gap")[0].options == {"floor": 0.0}
    for seed, nan in SEEDS:
        for contiguous in (False, True):
            check_parity("test_group_max_gap", cases_of("test_group_max_gap")[0], seed, nan, contiguous, F64,
                         make, rel_error)
    del reference.REFERENCES["test_group_max_gap"]
    with pytest.raises(AssertionError, match="no per-group loop oracle"):
        check_parity("test_group_max_gap", cases_of("test_group_max_gap")[0], 0, True, False, F64, make, rel_error)


def trl_sum_then_normalize(rewards_per_func, weights, num_generations, scale_rewards="group"):
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, sum_then_normalize branch."""
    from trl.trainer.utils import nanstd

    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    mean = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards)
    else:
        std = nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_normalize_then_sum(rewards_per_func, weights, num_generations):
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, normalize_then_sum branch."""
    from trl.trainer.utils import nanstd

    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, rewards_per_func.shape[1])
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    advantages = (rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_batch(seed, groups=16, g=8, k=3):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.rand(groups * g, k, generator=gen, dtype=torch.float32)
    rewards[:, 0] = (rewards[:, 0] > 0.5).float()
    rewards[torch.rand(groups * g, k, generator=gen) < 0.05] = float("nan")
    weights = torch.tensor([1.0, 0.5, 0.25])
    ids = torch.arange(groups).repeat_interleave(g)
    return rewards, weights, ids, g


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_matches_trl_sum_then_normalize(seed, scale):
    rewards, weights, ids, g = trl_batch(seed)
    expected = trl_sum_then_normalize(rewards.double(), weights.double(), g, scale)
    ours = mrgrpo.compute_advantages(rewards, ids, "grpo", weights, scale=scale)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_gdpo_matches_trl_normalize_then_sum(seed):
    rewards, weights, ids, g = trl_batch(seed)
    expected = trl_normalize_then_sum(rewards.double(), weights.double(), g)
    ours = mrgrpo.compute_advantages(rewards, ids, "gdpo", weights)
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-5)
