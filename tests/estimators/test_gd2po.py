"""gd2po (GD²PO, arXiv 2606.16771): worked example, errors, no-conflict identity (its per-group loop parity: test_reference_parity.py)."""

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import reference
from mrgrpo.estimators.gd2po import RATIO_EPS, SIGN_EPS, conflict_filter

@pytest.mark.parametrize("mode", ["hard", "snr"])
def test_float32_graded_rewards_decide_conflicts_as_float64(rel_error, mode):
    # Graded rewards put values exactly at their group's mean (z = 0): in float32 arithmetic such
    # a z-score is ~1e-7, above the 1e-8 sign threshold, and would flip the conflict test.
    rng = np.random.default_rng(0)
    rewards = np.stack([rng.integers(0, 2, 1200), rng.random(1200).round(1), (rng.random(1200) * 4).round() / 4], axis=1)
    ids = np.repeat(np.arange(200), 6)
    ours = mrgrpo.compute_advantages(torch.tensor(rewards, dtype=torch.float32), ids, "gd2po", mode=mode)
    assert ours.dtype == torch.float32
    exact = rewards.astype(np.float32).astype(np.float64)  # the values the estimator sees
    assert rel_error(ours, reference.gd2po(exact, list(ids), mode=mode)) <= 1e-6


def test_worked_example():
    # One group of 4, unbiased std, eps = 0.
    # r1 = [0, 0, 1, 1]: mean 0.5, std sqrt(1/3) = 0.577350 -> z1 = [-0.866025, -0.866025, 0.866025, 0.866025]
    # r2 = [1, 0, 1, 0]:                                     -> z2 = [0.866025, -0.866025, 0.866025, -0.866025]
    # rollouts 0 and 3 conflict (one z > 0, one < 0) and their sums cancel (agreement 0 < tau): dropped.
    # Kept: 1 and 2, S = -1.732051 and 1.732051; keep ratio 2/4 -> V = [-0.866025, 0.866025].
    # Whitened over the two kept: mean 0, std sqrt(2 * 0.75 / 1) = 1.224745 -> A = [0, -0.707107, 0.707107, 0].
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    expected = torch.tensor([0.0, -0.707107, 0.707107, 0.0], dtype=torch.float64)
    for mode in ("hard", "snr"):
        got = mrgrpo.compute_advantages(rewards, [0] * 4, "gd2po", mode=mode, eps=0.0)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_snr_keeps_a_conflicting_rollout_whose_components_mostly_agree():
    # r1 = [0, 1, 2, 3] -> z1 = [-1.161895, -0.387298, 0.387298, 1.161895]; r2 = [1, 0, 0, 0] -> z2 = [1.5, -0.5, -0.5, -0.5].
    # agreement |Σz|/Σ|z|: rollout 0: 0.338105/2.661895 = 0.127; 1: no conflict; 2: 0.112702/0.887298 = 0.127;
    # 3: 0.661895/1.661895 = 0.398. hard drops 0, 2, 3 (one kept: zeros); snr(tau=0.3) drops 0 and 2 only.
    rewards = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    hard = mrgrpo.compute_advantages(rewards, [0] * 4, "gd2po", mode="hard")
    snr = mrgrpo.compute_advantages(rewards, [0] * 4, "gd2po", mode="snr", tau=0.3)
    assert hard.tolist() == [0.0] * 4
    assert snr[0].item() == 0.0 and snr[2].item() == 0.0 and snr[1].item() < 0 < snr[3].item()
    assert mrgrpo.compute_advantages(rewards, [0] * 4, "gd2po", mode="snr", tau=0.8).tolist() == [0.0] * 4


@pytest.mark.parametrize("options", [{}, {"mode": "hard"}, {"eps": 1e-4, "ddof": 0}])
@pytest.mark.parametrize("contiguous", [False, True])
def test_without_conflicts_it_is_the_whitened_weighted_sum_of_zscores(make_batch, options, contiguous):
    # Every component a positive affine map of the first (per group): their z-scores share signs.
    rewards, ids, weights = make_batch(8, contiguous=contiguous, nan=False)
    base = rewards[:, 1:2]
    aligned = np.concatenate([base, 3 * base + 1, 0.5 * base - 2], axis=1)
    r = torch.from_numpy(aligned)
    w = weights[:3]
    eps, ddof = options.get("eps", 1e-6), options.get("ddof", 1)
    ours = mrgrpo.compute_advantages(r, ids, "gd2po", w, **options)
    gdpo = mrgrpo.compute_advantages(r, ids, "gdpo", w, eps=eps, ddof=ddof)  # S, then whitened over the batch
    torch.testing.assert_close(ours, gdpo, atol=1e-12, rtol=0)


def test_fewer_than_two_kept_rollouts_give_zeros():
    assert mrgrpo.compute_advantages([[1.0, 0.0]], [0], "gd2po").tolist() == [0.0]


@pytest.mark.parametrize(
    "options,message",
    [({"mode": "soft"}, "mode must be one of"), ({"tau": "high"}, "tau must be a number"), ({"eps": -1e-6}, "eps must be"),
     ({"ddof": -2}, "ddof must be")],
)
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        mrgrpo.compute_advantages([[1.0, 2.0], [2.0, 1.0]], [0, 0], "gd2po", **options)
    assert "\n" not in str(error.value)


def _adversarial_contributions(dtype):
    # Magnitudes from 1e-12 to 1e3, exact zeros, entries at and next to +-1e-8, and rows whose
    # significant entries share a sign next to tiny entries of the other sign (no conflict, yet
    # an agreement that can be below tau).
    rng = np.random.default_rng(0)
    n, k = 20000, 5
    u = rng.standard_normal((n, k)) * 10.0 ** rng.uniform(-12, 3, size=(n, 1))
    u[rng.random((n, k)) < 0.2] = 0.0
    edge = rng.random((n, k)) < 0.1
    u[edge] = rng.choice([-1.0, 1.0], edge.sum()) * 1e-8 * (1 + rng.choice([-1e-6, 0.0, 1e-6], edge.sum()))
    one_sided = slice(0, n // 3)
    u[one_sided] = np.abs(u[one_sided])
    u[one_sided, 0] = -1e-8 * rng.uniform(0, 1, n // 3)
    return torch.tensor(u, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tau", [0.0, 0.3, 0.8, 0.99, 1 - 1e-6, 1.0])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("factored", [False, True])
def test_conflict_filter_drops_exactly_as_the_sign_test(dtype, tau, dim, factored):
    # snr mode settles most drops from the agreement and a bound on the magnitude, without the
    # sign test: it must drop exactly the rollouts the sign test and the agreement drop, also
    # when given z and the weights (u = w * z, never formed but where the sign test runs).
    z = _adversarial_contributions(dtype)
    w = torch.tensor([0.3, -2.0, 1.0, 0.0, 1e-3], dtype=dtype) if factored else torch.ones(z.shape[1], dtype=dtype)
    u = z * w
    given, options = (z, {"factors": w}) if factored else (u, {})
    layout = given if dim == 1 else given.T.contiguous()
    summed, dropped = conflict_filter(layout, "snr", tau, dim=dim, **options)
    if dim == 1:
        magnitude = layout.abs() @ w.abs() if factored else layout.abs() @ w
    else:
        magnitude = w.abs() @ layout.abs() if factored else layout.abs().sum(dim=0)
    conflict = (u.amax(dim=1) > SIGN_EPS) & (u.amin(dim=1) < -SIGN_EPS)
    expected = conflict & (summed.abs() / (magnitude + RATIO_EPS) < tau)
    assert torch.equal(dropped, expected)
    assert 0 < int(expected.sum()) < u.shape[0] or tau == 0.0
    _, hard = conflict_filter(layout, "hard", tau, dim=dim, **options)
    assert torch.equal(hard, conflict)
