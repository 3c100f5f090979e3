"""ppsd/statistics.py: the shared statistics, each with one home."""

import math

import numpy as np
import pytest

from ppsd import statistics as st


def test_normal_quantiles():
    assert st.Z90 == pytest.approx(1.2815516, abs=1e-6)
    assert st.z_two_sided(0.9) == pytest.approx(1.6448536, abs=1e-6)


def test_robust_spreads_read_a_normal_and_shrug_off_one_outlier():
    rng = np.random.default_rng(0)
    x = 10.0 * np.exp(0.05 * rng.standard_normal(20000))
    assert st.robust_log_sd(x) == pytest.approx(0.05, rel=0.05)
    assert st.mad_log_sd(x) == pytest.approx(0.05, rel=0.05)
    assert st.robust_cv(x) == pytest.approx(0.05, rel=0.06)
    # five probe rounds, one of them a burst: p10..p90 of five values reaches the burst, the MAD does not
    rounds = [1.055, 1.071, 1.083, 1.886, 1.046]
    assert st.robust_log_sd(rounds) > 0.1 > 0.03 > st.mad_log_sd(rounds)
    assert st.mad_log_sd([1.0, 1.1]) == 0.0 and st.robust_sd([3.0]) == 0.0


def test_errors_mape_and_median_skip_what_is_missing():
    assert st.percent_error(1.1, 1.0) == pytest.approx(10.0)
    assert st.percent_error(None, 1.0) is None and st.percent_error(1.0, 0.0) is None
    assert st.mape([10.0, -20.0, None, float("nan")]) == pytest.approx(15.0)
    assert st.mape([]) is None
    assert st.median([3.0, None, 1.0, 2.0]) == 2.0 and st.median([1.0, 2.0]) == 1.5
    assert st.median([1.0, 2.0, 3.0], min_n=4) is None and st.median([float("nan")]) is None


def test_widened_combines_spreads_in_log_space():
    lo, hi = st.widened(0.9, 1.1, 2.0, 0.05)
    assert lo < 1.8 and hi > 2.2
    assert st.widened(0.9, 1.1, 2.0, 0.0) == pytest.approx((1.8, 2.2))


def test_expected_max_of_two_jittery_tasks():
    from ppsd.statistics import expected_max

    assert expected_max(10.0, 7.0, 0.0) == 10.0
    # balanced: the mean plus sigma*sqrt(2)*phi(0) = 10 * (1 + 0.05 * 0.5642)
    assert expected_max(10.0, 10.0, 0.05) == pytest.approx(10.0 * (1 + 0.05 / math.sqrt(math.pi)), rel=1e-6)
    # far apart: the slower one
    assert expected_max(10.0, 5.0, 0.02) == pytest.approx(10.0, rel=1e-6)
    rng = np.random.default_rng(0)
    draws = np.maximum(rng.normal(10, 0.4, 200_000), rng.normal(9.6, 0.384, 200_000))
    assert expected_max(10.0, 9.6, 0.04) == pytest.approx(draws.mean(), rel=2e-3)


def test_expected_max_of_several_jittery_tasks():
    assert st.expected_max_of([10.0, 7.0], 0.05) == pytest.approx(st.expected_max(10.0, 7.0, 0.05), rel=1e-12)
    assert st.expected_max_of([4.0, 9.0, 2.0], 0.0) == 9.0
    rng = np.random.default_rng(1)
    means = np.array([10.0, 9.8, 9.5, 10.1])
    draws = np.max(rng.normal(means, 0.05 * means, size=(200_000, 4)), axis=1)
    assert st.expected_max_of(means.tolist(), 0.05) == pytest.approx(draws.mean(), rel=2e-3)
    with pytest.raises(ValueError):
        st.expected_max_of([], 0.1)


def test_short_jitter_cv_reads_pass_to_pass_jitter_through_a_trend():
    rng = np.random.default_rng(2)
    n = 4000
    trend = np.linspace(30.0, 45.0, n) * (1 + 0.1 * np.sin(np.arange(n) / 400))  # context growth, drift
    assert st.short_jitter_cv(trend) < 1e-3  # a smooth series has no jitter however far it moves
    noisy = trend * np.exp(rng.normal(0.0, 0.04, n))
    assert st.short_jitter_cv(noisy) == pytest.approx(0.04, rel=0.06)
    assert st.short_jitter_cv([5.0, 6.0]) == 0.0  # too short to say
