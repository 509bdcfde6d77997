"""The papers' worked examples (CorrGRPO Figure 2, SA-MRPO's sign flip), to 4 decimals."""

import pytest
import torch

import mrgrpo
from mrgrpo.examples import EXAMPLES

FIG2 = torch.tensor(EXAMPLES["corrgrpo-fig2"].rewards, dtype=torch.float64)
GROUP = [0, 0, 0, 0]


def test_corrgrpo_figure2_grpo_advantages():
    # totals [1.08, 7.56, 9.72, 3.24], mean 5.4, sample variance 15.552 -> std 3.9436
    adv = mrgrpo.compute_advantages(FIG2, GROUP, "grpo", eps=0.0)
    assert adv.tolist() == pytest.approx([-1.0954, 0.5477, 1.0954, -0.5477], abs=1e-4)


def test_corrgrpo_figure2_corrgrpo_advantages():
    # Σρ = 3 + 2(0.9756 + 0.1098 + 0.1098) = 5.3904 -> scale 1/sqrt(5.3904) = 0.4307; -4.32 * 0.4307 = -1.8607
    adv = mrgrpo.compute_advantages(FIG2, GROUP, "corr_grpo")
    assert adv.tolist() == pytest.approx([-1.8607, 0.9304, 1.8607, -0.9304], abs=1e-4)


def test_corrgrpo_figure2_statistics():
    report = mrgrpo.diagnose(FIG2, GROUP)
    rho = report["correlation"]
    assert rho[0][1] == pytest.approx(0.9756, abs=1e-4)
    assert rho[0][2] == pytest.approx(0.1098, abs=1e-4)
    assert rho[1][2] == pytest.approx(0.1098, abs=1e-4)
    assert report["scale"]["grpo"] == pytest.approx(0.2536, abs=1e-4)
    assert report["scale"]["corr_grpo"] == pytest.approx(0.4307, abs=1e-4)
    # Var(r3) = 14.1696 of Var(T) = 15.5520, plus its covariances 2 * (0.1728 + 0.1728)/2 with r1, r2
    assert report["variance_share"]["r2"] == pytest.approx((14.1696 + 0.1728 * 2) / 15.5520, abs=1e-3)
    assert FIG2[:, 2].var().item() == pytest.approx(14.1696, abs=1e-4)
    assert FIG2.sum(1).var().item() == pytest.approx(15.5520, abs=1e-4)


SA = torch.tensor(EXAMPLES["sa-mrpo-sign-flip"].rewards, dtype=torch.float64)
RAW = dict(eps=0.0, ddof=0, batch_norm=False)


def test_sa_mrpo_gdpo_before_batch_norm():
    # format z = [-1.342, .447, 1.342, -.447]; correctness z = [-.728, -.243, -.728, 1.698]; rollout 3: 1.342 - .728
    adv = mrgrpo.compute_advantages(SA, GROUP, "gdpo", **RAW)
    assert adv[2].item() == pytest.approx(0.6140, abs=1e-4)


def test_sa_mrpo_sign_flip_with_gamma_one():
    # saturation: format .985, correctness .015 -> coefficients .015, .985
    # rollout 3: .015 * 1.342 + .985 * (-.728) = -.6966; rollout 4: .015 * (-.447) + .985 * 1.698 = 1.6656
    adv = mrgrpo.compute_advantages(SA, GROUP, "sa_mrpo", gamma=1.0, reward_ranges=[(0, 1), (0, 1)], **RAW)
    assert adv[2].item() == pytest.approx(-0.6966, abs=1e-4)
    assert adv[3].item() == pytest.approx(1.6656, abs=1e-4)
    gdpo = mrgrpo.compute_advantages(SA, GROUP, "gdpo", **RAW)
    assert gdpo[2] > 0 > adv[2]  # the sign of rollout 3 flips
