"""bench/stats.py: the figures every benchmark reports (each test names the rule it guards)."""

from __future__ import annotations

import math
import statistics

import pytest

from bench import stats


def test_rule_1_ms_is_a_quantile_of_seconds_in_milliseconds() -> None:
    assert stats.ms([0.010, 0.020, 0.030], 0.5) == pytest.approx(20.0)
    assert stats.median_ms([0.001, 0.003]) == pytest.approx(2.0)


def test_rule_2_values_that_are_not_finite_are_left_out_and_none_left_is_nan() -> None:
    assert stats.finite([1.0, float("nan"), float("inf"), 2.0]) == [1.0, 2.0]
    assert stats.median([1.0, float("nan"), 3.0]) == 2.0
    for figure in (stats.median([]), stats.p90([float("nan")]), stats.p99([]), stats.ms([], 0.5)):
        assert math.isnan(figure), "an empty cell is nan, not an error"


def test_rule_3_quantiles_interpolate_linearly_and_the_median_is_statistics_median() -> None:
    assert stats.quantile([1.0, 2.0], 0.9) == pytest.approx(1.9)
    assert stats.p90([float(v) for v in range(11)]) == pytest.approx(9.0)
    assert stats.p99([float(v) for v in range(101)]) == pytest.approx(99.0)
    assert stats.quantile([3.0, 1.0, 2.0], 1.0) == 3.0, "q=1 is the largest"
    for values in ([5.0], [1.0, 4.0], [3.0, 1.0, 2.0, 10.0, 7.0]):
        assert stats.median(values) == pytest.approx(statistics.median(values))
    assert stats.median(v for v in (1.0, 2.0, 3.0)) == 2.0, "any iterable"


def test_rule_4_a_ratio_without_a_figure_is_nan_not_a_division_error() -> None:
    assert stats.ratio(3.0, 2.0) == 1.5
    assert math.isnan(stats.ratio(1.0, 0.0))
    assert math.isnan(stats.ratio(float("nan"), 1.0))
    assert math.isnan(stats.ratio(1.0, float("nan")))


def test_rule5_wilson_interval_is_honest_at_zero_and_inside_0_1() -> None:
    low, high = stats.wilson(0, 60)
    assert low == 0.0 and 0.05 < high < 0.07, "0 of 60 is 0-6%, not a bare 0%"
    low, high = stats.wilson(60, 60)
    assert 0.93 < low < 0.95 and high == 1.0
    low, high = stats.wilson(3, 60)
    assert low < 0.05 < high, "3 of 60 cannot show a 5% target met or missed"
    assert all(math.isnan(x) for x in stats.wilson(0, 0))
