import math

from mrgrpo.experiments.stats import fmt_ci, mean_ci, paired, t975


def test_mean_ci_uses_student_t():
    # values 1, 2, 3: mean 2, sample sd 1, half-width t(0.975, 2) * 1 / sqrt(3) = 4.303 / 1.732
    mean, half, n = mean_ci([1.0, 2.0, 3.0, None, float("nan")])
    assert (mean, n) == (2.0, 3)
    assert math.isclose(half, 4.303 / math.sqrt(3), rel_tol=1e-9)
    assert t975(100) == 1.96


def test_mean_ci_degenerate():
    assert math.isnan(mean_ci([])[0])
    mean, half, n = mean_ci([0.5])
    assert mean == 0.5 and math.isnan(half) and n == 1
    assert fmt_ci(0.5, math.nan) == "0.500"


def test_paired_counts_sign_agreement():
    d = paired([1.0, 2.0, 3.0, 1.0], [0.0, 1.0, 4.0, 1.0])  # differences 1, 1, -1, 0
    assert d["n"] == 4 and d["positive"] == 2 and d["negative"] == 1
    assert math.isclose(d["mean"], 0.25)
