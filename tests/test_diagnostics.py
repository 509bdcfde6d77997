"""mrgrpo.diagnose: the batch statistics each estimator reacts to."""

import json
import math

import numpy as np
import pytest
import torch

import mrgrpo


def test_report_is_json_serializable_and_has_every_section():
    nan = float("nan")
    rewards = [[1, 0.5, nan], [0, 0.5, 2.0], [1, 1.0, 3.0], [1, 1.0, 3.0], [nan, nan, nan], [0, 0, 0]]
    report = mrgrpo.diagnose(rewards, [0, 0, 0, 1, 1, 1], reward_ranges=[(0, 1), (0, 1), (0, 5)], names=["a", "b", "c"])
    text = json.dumps(report, allow_nan=False)  # no NaN anywhere
    assert "NaN" not in text
    assert set(report) >= {
        "components", "correlation", "variance_share", "scale", "zero_variance_fraction", "advantage_collapse",
    }
    assert report["components"]["a"]["saturation"] == pytest.approx(0.6)
    assert report["components"]["c"]["scored"] == pytest.approx(4 / 6)


def test_variance_shares_sum_to_one_and_follow_weights():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(64, 3)) * [1.0, 1.0, 10.0]
    ids = np.repeat(np.arange(8), 8)
    report = mrgrpo.diagnose(rewards, ids)
    shares = report["variance_share"]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["r2"] > 0.9  # the ×10 component owns GRPO's denominator
    reweighted = mrgrpo.diagnose(rewards, ids, weights=[1.0, 1.0, 0.1])["variance_share"]
    assert reweighted["r2"] < 0.6


def test_zero_variance_fraction_and_scales():
    # group 0: totals [2, 2], constant; group 1: totals [1, 2]
    rewards = [[1, 1], [1, 1], [0, 1], [1, 1]]
    report = mrgrpo.diagnose(rewards, [0, 0, 1, 1])
    assert report["zero_variance_fraction"] == 0.5
    assert report["scale"]["grpo"] == pytest.approx(1 / (math.sqrt(0.5) + 1e-4))
    # one varying component (r0): Σρ = 1
    assert report["scale"]["corr_grpo"] == pytest.approx(1 / math.sqrt(1 + 1e-6))
    assert mrgrpo.diagnose([[1, 1], [1, 1]], [0, 0])["scale"]["grpo"] is None  # no varying group


def test_correlation_averages_only_where_defined():
    # group 0: r0, r1 perfectly correlated; group 1: r1 constant, so ρ01 undefined there
    rewards = [[0, 0], [1, 1], [0, 5], [1, 5]]
    report = mrgrpo.diagnose(rewards, [0, 0, 1, 1])
    assert report["correlation"][0][1] == pytest.approx(1.0)
    assert report["correlation"][1][1] == pytest.approx(1.0)


def test_advantage_collapse_counts_distinct_values():
    # GDPO's example: profiles (0,1) and (1,0) vs (0,0)... GRPO maps (1,0) and (0,1) to the same total
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    report = mrgrpo.diagnose(rewards, [0, 0, 0, 0], weights=[1.0, 0.5])
    collapse = report["advantage_collapse"]
    assert collapse["distinct_reward_profiles"] == 4
    assert collapse["distinct_advantages"]["gdpo"] == 4
    unweighted = mrgrpo.diagnose(rewards, [0, 0, 0, 0])["advantage_collapse"]
    assert unweighted["distinct_advantages"]["grpo"] == 3  # (1,0) and (0,1) collapse
    assert "sa_mrpo" not in unweighted["distinct_advantages"]  # needs ranges


def test_bad_names_length():
    with pytest.raises(ValueError, match="names"):
        mrgrpo.diagnose([[1.0, 2.0]], [0], names=["only_one"])


def test_advantage_collapse_can_be_limited_to_some_estimators():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    report = mrgrpo.diagnose(rewards, [0] * 4, estimators=["corr_grpo"])
    assert list(report["advantage_collapse"]["distinct_advantages"]) == ["corr_grpo"]
    with pytest.raises(ValueError, match="unknown estimator"):
        mrgrpo.diagnose(rewards, [0] * 4, estimators=["nope"])


SATURATION_BATCH = torch.tensor(
    # group 0: the profiles (1,0), (0,1), (0,0), (1,1); group 1 saturates component 0 only
    [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0]]
)
SATURATION_IDS = [0] * 4 + [1] * 4


def test_advantage_collapse_runs_the_estimator_with_the_options_being_trained():
    ranges = [(0.0, 1.0), (0.0, 1.0)]
    # gamma = 0 is GDPO with equal weights: (1,0) and (0,1) get the same advantage in group 0
    plain = mrgrpo.diagnose(
        SATURATION_BATCH, SATURATION_IDS, reward_ranges=ranges, estimators=["sa_mrpo"],
        estimator_options={"sa_mrpo": {"gamma": 0.0}},
    )
    # the default gamma (0.5) weights the less saturated component 1 more: they separate
    default = mrgrpo.diagnose(SATURATION_BATCH, SATURATION_IDS, reward_ranges=ranges, estimators=["sa_mrpo"])
    assert plain["advantage_collapse"]["distinct_advantages"]["sa_mrpo"] == (3 + 2) / 2
    assert default["advantage_collapse"]["distinct_advantages"]["sa_mrpo"] == (4 + 2) / 2


def test_advantage_collapse_counts_the_advantages_given_instead_of_rerunning():
    # e.g. a trainer's advantages computed with an EMA correlation: counted as they are
    given = torch.tensor([0.5, 0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    report = mrgrpo.diagnose(SATURATION_BATCH, SATURATION_IDS, estimators=["corr_grpo"], advantages={"corr_grpo": given})
    assert report["advantage_collapse"]["distinct_advantages"] == {"corr_grpo": (2 + 1) / 2}
    rerun = mrgrpo.diagnose(SATURATION_BATCH, SATURATION_IDS, estimators=["corr_grpo"])
    assert rerun["advantage_collapse"]["distinct_advantages"]["corr_grpo"] != (2 + 1) / 2


def test_advantage_collapse_options_are_checked():
    with pytest.raises(ValueError, match="unknown estimator"):
        mrgrpo.diagnose(SATURATION_BATCH, SATURATION_IDS, estimator_options={"nope": {}})
    with pytest.raises(ValueError, match="no option"):
        mrgrpo.diagnose(SATURATION_BATCH, SATURATION_IDS, estimators=["grpo"], estimator_options={"grpo": {"gamma": 1}})
    with pytest.raises(ValueError, match="scale must be one of"):
        mrgrpo.diagnose(SATURATION_BATCH, SATURATION_IDS, estimators=["grpo"], estimator_options={"grpo": {"scale": "x"}})
    with pytest.raises(ValueError, match="3 entries for 8 rollouts"):
        mrgrpo.diagnose(SATURATION_BATCH, SATURATION_IDS, advantages={"grpo": [0.0, 1.0, 2.0]})


def test_a_total_constant_up_to_float32_rounding_counts_as_constant():
    # group 0: two components that cancel exactly in real numbers; in float32 the second is
    # 1 - the first rounded, so the total differs by rounding only. group 1 varies genuinely.
    a = torch.tensor([0.1, 0.7, 0.3, 0.9], dtype=torch.float32)
    rewards = torch.stack([torch.cat([a, torch.tensor([0.0, 1.0])]), torch.cat([1 - a, torch.tensor([0.0, 0.0])])], dim=1)
    ids = [0, 0, 0, 0, 1, 1]
    report = mrgrpo.diagnose(rewards, ids)
    assert report["zero_variance_fraction"] == 0.5
    shares = report["variance_share"]
    assert all(abs(v) <= 1.0 + 1e-9 for v in shares.values()), shares  # not ±1e6 from rounding noise
    assert sum(shares.values()) == pytest.approx(1.0)
