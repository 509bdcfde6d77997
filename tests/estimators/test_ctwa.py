"""ctwa (CTWA, arXiv 2602.06869): the weight update over several steps against a hand-written
loop oracle of the official code, the step order (a step's weights are those before its own
update), the on-policy limit without a trainer, state round trips, the source's statistics
(outliers, correlation, the gate), errors and the CLI listing."""

import json
import math

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError, InputError
from mrgrpo.estimators import get_estimator, make_groups, reference
from mrgrpo.estimators.registry import (
    SIGNAL_AGGREGATIONS, apply_feedback, as_weights, clipped_ratio_advantage, signal_options, validate_options,
)


def _signal(rng, n, outliers=True):
    s = rng.normal(size=n) * 0.3
    if outliers:
        s[rng.integers(0, n, size=2)] *= 1e4  # beyond 100x the median |s|: dropped
    return s


def _run(rewards_by_step, ids, weights, signals, options, dtype=torch.float64):
    """The registry's path, step by step: advantages from the incoming state, then the feedback."""
    spec = get_estimator("ctwa")
    state, out = None, []
    for rewards, s in zip(rewards_by_step, signals):
        values = torch.from_numpy(rewards).to(dtype)
        adv, _ = mrgrpo.compute_advantages_with_state(values, ids, "ctwa", weights, state=state, **options)
        groups = make_groups(ids, len(ids))
        resolved = validate_options(spec, options, rewards.shape[1])
        state = apply_feedback(spec, values, groups, as_weights(weights, rewards.shape[1], values.device), resolved, state, s)
        state = json.loads(json.dumps(state))  # (what a checkpoint holds)
        out.append((adv.double().numpy(), state))
    return out


def _oracle(rewards_by_step, ids, weights, signals, options):
    base = options.get("base", "reinforce_pp")
    update = {k: v for k, v in options.items() if k != "base"}
    w = np.asarray(weights, dtype=np.float64)
    log_w = list(np.log(np.maximum(w / w.sum(), 1e-8)))
    ema, out = None, []
    for rewards, s in zip(rewards_by_step, signals):
        adv = reference.ctwa_advantages(rewards, list(ids), np.exp(log_w), base)
        log_w, ema = reference.ctwa_update(log_w, ema, rewards, list(ids), s, **update)
        out.append((adv, list(log_w), list(ema)))
    return out


OPTIONS = [
    {"cov_targets": [0.3, 0.2, 0.25], "gate_by_obj_targets": False},
    {"cov_targets": 0.4, "obj_targets": [0.6, 10.0, 10.0], "ema_tau": 0.3, "lr": 0.5},
    {"cov_targets": [0.9, 0.5, 0.7], "use_corr_target": True, "gate_by_obj_targets": False, "base": "grpo", "lr": 0.1},
    {"cov_targets": [0.3, 0.2, 0.25], "obj_targets": [0.0, 0.0, 0.0], "gate_by_obj_targets": False, "ema_tau": 1.0},
    {"cov_targets": [0.3, 0.2, 0.25], "gate_by_obj_targets": False, "global_metrics": True},
    {"cov_targets": [0.9, 0.5, 0.7], "use_corr_target": True, "gate_by_obj_targets": False, "global_metrics": True, "lr": 0.1},
]


@pytest.mark.parametrize("outliers", [True, False])  # (False, without NaN: every row kept, the dense path)
@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("options", OPTIONS)
def test_update_rule_over_several_steps_equals_the_loop_oracle(rel_error, options, nan, outliers):
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 7, size=12)
    ids = np.repeat(np.arange(12) * 5 + 1, sizes)
    rng.shuffle(ids)
    n = len(ids)
    steps = []
    for _ in range(6):
        rewards = np.stack([rng.integers(0, 2, n), rng.random(n), rng.normal(size=n) * 2], axis=1).astype(np.float64)
        if nan:
            rewards[rng.random((n, 3)) < 0.1] = np.nan
            rewards[0] = np.nan
        steps.append(rewards)
    signals = [_signal(rng, n, outliers) for _ in steps]
    weights = [0.5, 0.3, 0.2]
    ours = _run(steps, ids, weights, signals, options)
    expected = _oracle(steps, ids, weights, signals, options)
    moved = False
    for (adv, state), (adv_ref, log_w, ema) in zip(ours, expected):
        assert rel_error(adv, adv_ref) <= 1e-6
        np.testing.assert_allclose(state["log_weights"], log_w, rtol=0, atol=1e-6)
        np.testing.assert_allclose(state["ema"], ema, rtol=0, atol=1e-6)
        assert state["signal"] == "policy"
        moved |= bool(np.any(np.abs(np.asarray(log_w) - np.log(np.asarray(weights))) > 1e-3))
    assert moved, "the options must let the weights move, or the test cannot fail"
    assert ours[-1][1]["steps"] == 6


def test_float32_rewards_follow_the_oracle(rel_error):
    rng = np.random.default_rng(1)
    ids = np.repeat(np.arange(10), 6)
    steps = [np.stack([rng.integers(0, 2, 60), rng.random(60), rng.random(60)], axis=1) for _ in range(4)]
    signals = [_signal(rng, 60, outliers=False) for _ in steps]
    options = {"cov_targets": 0.3, "gate_by_obj_targets": False, "lr": 0.3}
    ours = _run(steps, ids, [1.0, 1.0, 2.0], signals, options, dtype=torch.float32)
    expected = _oracle([s.astype(np.float32).astype(np.float64) for s in steps], ids, [1.0, 1.0, 2.0], signals, options)
    for (adv, state), (adv_ref, log_w, _) in zip(ours, expected):
        assert rel_error(adv, adv_ref) <= 1e-6
        np.testing.assert_allclose(state["log_weights"], log_w, rtol=0, atol=1e-6)


def test_a_step_uses_the_weights_before_its_own_update():
    rng = np.random.default_rng(2)
    ids = np.repeat(np.arange(8), 4)
    rewards = rng.random((32, 3))
    options = {"cov_targets": 1.0, "gate_by_obj_targets": False, "lr": 1.0}
    first, state = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", [0.2, 0.3, 0.5], **options)
    again, _ = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", [0.2, 0.3, 0.5], **options)
    torch.testing.assert_close(first, again)  # (the update did not reach its own step)
    expected = reference.ctwa_advantages(rewards, list(ids), [0.2, 0.3, 0.5])
    np.testing.assert_allclose(first.numpy(), expected, rtol=0, atol=1e-6)
    second, _ = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", [0.2, 0.3, 0.5], state=state, **options)
    moved = reference.ctwa_advantages(rewards, list(ids), np.exp(state["log_weights"]))
    np.testing.assert_allclose(second.numpy(), moved, rtol=0, atol=1e-6)
    assert not np.allclose(second.numpy(), first.numpy(), atol=1e-4)


def test_without_a_trainer_it_takes_the_on_policy_limit_and_says_so():
    rng = np.random.default_rng(3)
    ids = np.repeat(np.arange(6), 5)
    rewards = rng.random((30, 3))
    options = {"cov_targets": 0.5, "gate_by_obj_targets": False, "lr": 0.2}
    adv, state = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", [1.0, 1.0, 1.0], **options)
    assert state["signal"] == "on_policy_limit"
    log_w, ema = reference.ctwa_update(list(np.log([1 / 3] * 3)), None, rewards, list(ids), adv.numpy(), **options)
    np.testing.assert_allclose(state["log_weights"], log_w, rtol=0, atol=1e-9)
    np.testing.assert_allclose(state["ema"], ema, rtol=0, atol=1e-9)
    assert get_estimator("ctwa").signal == "clipped_ratio_advantage"
    assert get_estimator("ctwa").traits()["signal"] == "clipped_ratio_advantage"


def test_state_round_trip_resumes_exactly():
    rng = np.random.default_rng(4)
    ids = np.repeat(np.arange(5), 4)
    batches = [rng.random((20, 3)) for _ in range(4)]
    options = {"cov_targets": 0.5, "gate_by_obj_targets": False, "lr": 0.3}
    state, straight = None, []
    for rewards in batches:
        adv, state = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", None, state=state, **options)
        straight.append(adv)
    state = None
    for i, rewards in enumerate(batches):
        if i == 2:  # "resume": the state goes through JSON, as a checkpoint holds it
            state = json.loads(json.dumps(state, allow_nan=False))
        adv, state = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", None, state=state, **options)
        assert torch.equal(adv, straight[i])


def test_outliers_median_and_correlation_are_the_sources():
    ids = [0, 0, 0, 0, 1, 1, 1, 1, 2]
    rewards = np.array([[1.0, 0.2], [0.0, 0.4], [1.0, 0.4], [0.0, 0.9], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.5, 0.5]])
    s = np.array([0.1, -0.2, 0.3, 0.05, 0.2, -0.1, 500.0, 0.1, 0.3])  # 500 > 100 x median(|s|) = 100 x 0.2
    from mrgrpo.estimators.ctwa import signal_statistics

    ours = signal_statistics(torch.from_numpy(rewards), make_groups(ids, 9), torch.from_numpy(s))
    expected = reference.ctwa_statistics(rewards, ids, s)
    np.testing.assert_allclose(ours["cov"], expected["cov"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours["corr"], expected["corr"], rtol=0, atol=1e-12)
    assert ours["kept"] == 8 and ours["groups"] == 2
    # group 1 is constant in both components: it counts for the covariance (0), not the correlation
    group0 = rewards[:4, 0] - rewards[:4, 0].mean(), s[:4] - s[:4].mean()
    assert ours["cov"][0] == pytest.approx(float(np.mean(group0[0] * group0[1])) / 2, abs=1e-12)
    assert ours["corr"][0] == pytest.approx(float(np.mean(group0[0] * group0[1]) / (np.std(group0[0]) * np.std(group0[1]))), abs=1e-12)


def test_global_metrics_pools_the_groups_centred_products_as_the_source_does():
    # the source's pooled mode restated: within-group centring, then sums over every row of the
    # groups of >= 2 kept rows; cov = Σuc·wc/n, corr = cov/(sqrt(Σuc²/n)·sqrt(Σwc²/n))
    ids = [0, 0, 0, 0, 1, 1, 1, 1, 2, 3, 3]
    rewards = np.array([[1.0, 0.2], [0.0, 0.4], [1.0, 0.4], [0.0, 0.9], [1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0],
                        [0.5, 0.5], [0.0, 0.3], [1.0, 0.1]])
    s = np.array([0.1, -0.2, 0.3, 0.05, 0.2, -0.1, 500.0, 0.1, 0.3, -0.4, 0.6])  # 500: an outlier, dropped
    from mrgrpo.estimators.ctwa import signal_statistics

    ours = signal_statistics(torch.from_numpy(rewards), make_groups(ids, 11), torch.from_numpy(s), global_metrics=True)
    keep = [i for i in range(11) if i != 6]
    cross, uu, ww, n = np.zeros(2), np.zeros(2), 0.0, 0
    for g in (0, 1, 3):  # group 2 has one row
        rows = [i for i in keep if ids[i] == g]
        uc = rewards[rows] - rewards[rows].mean(axis=0)
        wc = s[rows] - s[rows].mean()
        cross += (uc * wc[:, None]).sum(axis=0)
        uu += (uc * uc).sum(axis=0)
        ww += float((wc * wc).sum())
        n += len(rows)
    cov = cross / n
    corr = cov / (np.sqrt(uu / n) * np.sqrt(ww / n))
    np.testing.assert_allclose(ours["cov"], cov, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours["corr"], corr, rtol=0, atol=1e-12)
    per_group = signal_statistics(torch.from_numpy(rewards), make_groups(ids, 11), torch.from_numpy(s))
    assert not np.allclose(per_group["cov"], ours["cov"])  # (the two modes differ on this batch)
    expected = reference.ctwa_statistics(rewards, ids, s, global_metrics=True)
    np.testing.assert_allclose(ours["cov"], expected["cov"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours["corr"], expected["corr"], rtol=0, atol=1e-12)


def test_the_gate_stops_an_objective_that_meets_its_target():
    ids = np.repeat(np.arange(4), 4)
    rng = np.random.default_rng(5)
    rewards = np.stack([np.ones(16), rng.random(16)], axis=1)
    rewards[0, 0] = 0.0  # mean 15/16 >= 0.9: gated
    options = {"cov_targets": 5.0, "obj_targets": [0.9, 2.0], "lr": 1.0}
    _, state = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", [0.5, 0.5], **options)
    assert state["deficit"]["0"] == 0.0 and state["log_weights"][0] == pytest.approx(math.log(0.5))
    assert state["deficit"]["1"] > 0 and state["log_weights"][1] > math.log(0.5)
    _, ungated = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", [0.5, 0.5], gate_by_obj_targets=False, **options)
    assert ungated["deficit"]["0"] > 0


@pytest.mark.parametrize(
    "options,message",
    [({"base": "ppo"}, "base must be one of"), ({"ema_tau": 1.5}, "ema_tau must be in"), ({"lr": -0.1}, "lr must be in"),
     ({"cov_targets": [0.1, 0.2]}, "cov_targets has 2 entries but there are 3 components"),
     ({"use_corr_target": 1}, "use_corr_target must be True or False"), ({"obj_targets": "high"}, "obj_targets must be"),
     ({"global_metrics": "yes"}, "global_metrics must be True or False"), ({"w_agg": "max"}, "w_agg must be one of")],
)
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages(np.random.default_rng(0).random((8, 3)), [0] * 4 + [1] * 4, "ctwa", **options)
    assert "\n" not in str(error.value)


def test_defaults_are_the_official_configs_first_component_then_the_others():
    spec = get_estimator("ctwa")
    assert spec.options["cov_targets"] is None and spec.options["obj_targets"] is None
    assert spec.options["ema_tau"] == 0.1 and spec.options["lr"] == 0.02 and spec.options["base"] == "reinforce_pp"
    assert spec.options["use_corr_target"] is False and spec.options["gate_by_obj_targets"] is True
    assert spec.options["global_metrics"] is False
    from mrgrpo.estimators.ctwa import per_component

    assert per_component(None, 3, "cov_targets") == [0.1, 0.05, 0.05]  # the official config's three
    assert per_component(None, 3, "obj_targets") == [1.0, 0.95, 0.95]
    assert per_component(None, 2, "cov_targets") == [0.1, 0.05] and per_component(None, 4, "obj_targets") == [1.0, 0.95, 0.95, 0.95]
    rng = np.random.default_rng(6)
    for k in (2, 4):
        ids = np.repeat(np.arange(5), 4)
        rewards = rng.random((20, k))
        rewards[:, 0] = 1.0  # component 0 meets its default obj_target (1.0): gated
        _, state = mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", None, lr=1.0)
        log_w, ema = reference.ctwa_update(list(np.log([1 / k] * k)), None, rewards, list(ids),
                                           reference.ctwa(rewards, list(ids)), lr=1.0)
        np.testing.assert_allclose(state["log_weights"], log_w, rtol=0, atol=1e-9)
        assert state["deficit"]["0"] == 0.0


@pytest.mark.parametrize("weights", [[1.0, -1.0, 1.0], [0.0, 0.0, 0.0]])
def test_weights_must_be_nonnegative_and_not_all_zero(weights):
    with pytest.raises(ConfigError, match="weights must be >= 0"):
        mrgrpo.compute_advantages(np.random.default_rng(0).random((8, 3)), [0] * 4 + [1] * 4, "ctwa", weights)


def test_a_state_of_another_run_and_a_bad_signal_are_refused():
    rewards = np.random.default_rng(0).random((8, 3))
    ids = [0] * 4 + [1] * 4
    with pytest.raises(ConfigError, match="does not hold 3 log-weights"):
        mrgrpo.compute_advantages_with_state(rewards, ids, "ctwa", state={"log_weights": [0.0, 0.0], "ema": None})
    spec = get_estimator("ctwa")
    values = torch.from_numpy(rewards)
    options = validate_options(spec, {}, 3)
    groups = make_groups(ids, 8)
    with pytest.raises(InputError, match="non-finite"):
        apply_feedback(spec, values, groups, torch.ones(3, dtype=torch.float64), options, None, [float("nan")] * 8)
    with pytest.raises(InputError, match="has 7 entries but the step had 8"):
        apply_feedback(spec, values, groups, torch.ones(3, dtype=torch.float64), options, None, [0.0] * 7)
    with pytest.raises(ConfigError, match="takes no feedback"):
        apply_feedback(get_estimator("grpo"), values, groups, torch.ones(3, dtype=torch.float64), {}, None, [0.0] * 8)


def test_mrgrpo_estimators_lists_it_with_its_options():
    from typer.testing import CliRunner

    from mrgrpo.cli import app

    result = CliRunner().invoke(app, ["estimators", "--json"])
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.output) if r["name"] == "ctwa")
    assert row["options"]["cov_targets"] is None and row["options"]["lr"] == 0.02 and row["options"]["ema_tau"] == 0.1
    assert set(row["options"]) == {"base", "cov_targets", "obj_targets", "use_corr_target", "gate_by_obj_targets", "ema_tau", "lr",
                                   "global_metrics", "w_agg"}
    assert row["traits"]["stateful"] and row["traits"]["signal"] == "clipped_ratio_advantage"


@pytest.mark.parametrize("w_agg", SIGNAL_AGGREGATIONS)
def test_the_signal_aggregates_each_rollouts_tokens_as_w_agg_says_as_the_source(w_agg):
    """clipped_ratio_advantage (what every trainer calls) against the official compute_ctwa_stats'
    completion weight token by token, with clipped tokens of both signs, a row whose tokens are
    all clipped and a row without response tokens; the trainers read w_agg from the options."""
    rng = np.random.default_rng(5)
    n, t = 12, 9
    mask = (rng.random((n, t)) > 0.3).astype(float)
    mask[-1] = 0.0  # no response token
    advantages = rng.normal(size=n)
    old = -rng.random((n, t)) * 3
    new = old + rng.normal(size=(n, t)) * 0.4
    new[0] = old[0] + (1.0 if advantages[0] >= 0 else -1.0)  # every token of row 0 clipped
    token_advantages = advantages[:, None] * np.ones((n, t))
    want = reference.ctwa_signal(token_advantages, old, new, mask, 0.2, 0.28, w_agg)
    got = clipped_ratio_advantage(torch.from_numpy(advantages), torch.from_numpy(old), torch.from_numpy(new),
                                  torch.from_numpy(mask), 0.2, 0.28, w_agg=w_agg)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert got[0] == 0.0 and got[-1] == 0.0
    spec = get_estimator("ctwa")
    assert signal_options(spec, {"w_agg": w_agg}) == {"w_agg": w_agg} and signal_options(spec, {}) == {"w_agg": "mean"}


def test_the_aggregations_differ_where_the_source_says():
    """mean divides by all response tokens, mean_unclipped by the unclipped ones, sum not at all."""
    advantages = torch.tensor([1.0])
    old = torch.zeros(1, 4, dtype=torch.float64)
    new = torch.tensor([[0.0, 0.0, 2.0, 0.0]], dtype=torch.float64)  # token 2: ratio e^2, clipped for A >= 0
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    values = {w: float(clipped_ratio_advantage(advantages, old, new, mask, 0.2, 0.2, w_agg=w)) for w in SIGNAL_AGGREGATIONS}
    assert values["sum"] == pytest.approx(2.0) and values["mean"] == pytest.approx(2.0 / 3)
    assert values["mean_unclipped"] == pytest.approx(2.0 / (2 + 1e-8), rel=1e-12)


@pytest.mark.parametrize("contiguous", [True, False])
def test_the_dense_path_equals_the_general_one(contiguous):
    """Every rollout kept and scored: the statistics from the grouped moments (one centred signal
    column) equal the general masked computation, on block and on shuffled layouts, with groups of
    one row, constant components and an offset that a one-pass variance would cancel."""
    from mrgrpo.estimators import ctwa as module

    rng = np.random.default_rng(11)
    ids = np.repeat(np.arange(40), 6) if contiguous else rng.permutation(np.concatenate([np.repeat(np.arange(39), 6), [99]]))
    n = len(ids)
    rewards = torch.from_numpy(np.stack([rng.integers(0, 2, n), 1e4 + rng.random(n) * 1e-3, np.ones(n), rng.normal(size=n)], 1))
    signal = torch.from_numpy(rng.normal(size=n) * 0.2)
    groups = make_groups(torch.from_numpy(ids), n)
    dense = module._dense_statistics(rewards, groups, signal)
    assert dense is not None
    general = module.signal_statistics(rewards.clone(), groups, signal.clone().index_put_((torch.tensor([0]),), torch.tensor(float("nan"), dtype=torch.float64)))
    # (a NaN signal drops row 0 and takes the general path; compare with row 0 dropped densely too)
    keep = torch.ones(n, dtype=torch.bool)
    keep[0] = False
    dense_without_0 = module._dense_statistics(rewards[keep], make_groups(torch.from_numpy(ids)[keep], n - 1), signal[keep])
    for key in ("cov", "corr"):
        np.testing.assert_allclose(dense_without_0[key], general[key], rtol=1e-9, atol=1e-12)
    oracle = reference.ctwa_statistics(rewards.numpy(), ids.tolist(), signal.numpy())
    for key in ("cov", "corr", "objective_mean"):
        np.testing.assert_allclose(dense[key], oracle[key], rtol=1e-9, atol=1e-12)
    assert dense["kept"] == n
