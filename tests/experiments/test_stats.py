import math

import pytest

from mrgrpo.experiments.stats import fmt_ci, holm, holm_family, mean_ci, paired, paired_p, t975, t_two_sided_p


def test_mean_ci_uses_student_t():
    # values 1, 2, 3: mean 2, sample sd 1, half-width t(0.975, 2) * 1 / sqrt(3) = 4.303 / 1.732
    mean, half, n = mean_ci([1.0, 2.0, 3.0, None, float("nan")])
    assert (mean, n) == (2.0, 3)
    assert math.isclose(half, 4.303 / math.sqrt(3), rel_tol=1e-9)


def test_t_quantile_for_every_df_not_the_normal_beyond_30():
    # the closed forms at df 1 (Cauchy) and 2, to the table's 3 decimals
    assert round(math.tan(math.pi / 2 * 0.95), 3) == t975(1)
    assert round(0.95 * math.sqrt(2 / (1 - 0.95**2)), 3) == t975(2)
    # the published table: a normal 1.96 past df 30 made intervals 2-4% too narrow there
    for df, table in ((31, 2.040), (40, 2.021), (60, 2.000), (100, 1.984), (1000, 1.962)):
        assert round(t975(df), 3) == table
        assert math.isclose(t_two_sided_p(t975(df), df), 0.05, abs_tol=1e-9)
    assert 1.95996 < t975(10**6) < 1.96
    assert math.isnan(t975(0))


def test_mean_ci_degenerate():
    assert math.isnan(mean_ci([])[0])
    mean, half, n = mean_ci([0.5])
    assert mean == 0.5 and math.isnan(half) and n == 1
    assert fmt_ci(0.5, math.nan) == "0.500"


def test_paired_counts_sign_agreement():
    d = paired([1.0, 2.0, 3.0, 1.0], [0.0, 1.0, 4.0, 1.0])  # differences 1, 1, -1, 0
    assert d["n"] == 4 and d["positive"] == 2 and d["negative"] == 1
    assert math.isclose(d["mean"], 0.25)
    assert math.isclose(d["p"], paired_p([1.0, 1.0, -1.0, 0.0]))


def test_t_p_value_matches_closed_forms_and_tables():
    # df = 1 (Cauchy): p = 1 − (2/π)·atan|t|; df = 2: p = 1 − |t| / sqrt(t² + 2)
    for t in (0.3, 1.0, 4.0):
        assert math.isclose(t_two_sided_p(t, 1), 1 - 2 / math.pi * math.atan(t), rel_tol=1e-9)
        assert math.isclose(t_two_sided_p(-t, 2), 1 - t / math.sqrt(t * t + 2), rel_tol=1e-9)
    # the tabulated 97.5% quantiles give p = 0.05
    for df in (4, 9, 30):
        assert math.isclose(t_two_sided_p(t975(df), df), 0.05, abs_tol=2e-4)
    assert t_two_sided_p(0.0, 4) == 1.0


def test_paired_p_is_the_one_sample_t_test():
    # differences 1, 2, 3: t = 2 / (1 / sqrt 3) = 3.464, df 2
    assert math.isclose(paired_p([1.0, 2.0, 3.0]), 1 - 3.464101615 / math.sqrt(3.464101615**2 + 2), rel_tol=1e-6)
    assert paired_p([0.5, 0.5, 0.5]) == 0.0 and paired_p([0.0, 0.0]) == 1.0
    assert math.isnan(paired_p([1.0, None]))


def test_holm_step_down():
    # m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (monotone), 0.5 (capped by max)
    adjusted = holm([0.03, 0.5, 0.01, 0.02, float("nan")])
    assert adjusted[:4] == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert math.isnan(adjusted[4])
    assert holm([0.9, 0.8]) == [1.0, 1.0]  # 2 · 0.8 capped at 1, and the larger one never below it


def test_holm_family_adjusts_a_whole_table_in_place():
    table = {"gdpo": {"correct": {"p": 0.01}, "format": {"p": 0.04}}, "sa_mrpo": {"correct": {"p": 0.03}, "format": {"p": math.nan}}}
    assert holm_family(table) == 3
    assert table["gdpo"]["correct"]["p_holm"] == pytest.approx(0.03)  # 3 · 0.01
    assert table["sa_mrpo"]["correct"]["p_holm"] == pytest.approx(0.06)  # 2 · 0.03
    assert table["gdpo"]["format"]["p_holm"] == pytest.approx(0.06)  # max(1 · 0.04, 0.06)
    assert math.isnan(table["sa_mrpo"]["format"]["p_holm"])
