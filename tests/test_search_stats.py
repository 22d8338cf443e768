"""Mean ± std over seeds, the one function behind every results table: sample std (ddof 1)."""

from __future__ import annotations

import math

import pytest

from fedsim.search.stats import format_mean_std, mean_std, mean_std_cell


def test_sample_std_by_hand():
    # mean 0.8; squared deviations 0.01, 0, 0.01 -> sum 0.02 / (3 - 1) = 0.01 -> std 0.1
    mean, std = mean_std([0.7, 0.8, 0.9])
    assert mean == pytest.approx(0.8) and std == pytest.approx(0.1)
    # two seeds: deviations +-0.05 -> 0.005 / 1 -> sqrt = 0.070710678
    assert mean_std([0.8, 0.9])[1] == pytest.approx(0.0707106781)


def test_one_value_none_and_non_finite():
    mean, std = mean_std([0.5])
    assert mean == 0.5 and math.isnan(std)
    assert all(math.isnan(v) for v in mean_std([]))
    assert mean_std([0.7, float("nan"), 0.9]) == pytest.approx((0.8, 0.1414213562))


def test_cells():
    assert mean_std_cell([0.7, 0.8, 0.9]) == "80.00 ± 10.00"
    assert mean_std_cell([0.5]) == "50.00"
    assert mean_std_cell([]) == "n/a"
    assert mean_std_cell([1.0, 3.0], scale=1, digits=1) == "2.0 ± 1.4"
    assert format_mean_std(0.85, 0.05) == "85.00 ± 5.00"
    assert format_mean_std(0.85, math.nan) == "85.00"
    assert format_mean_std(math.nan, math.nan) == "n/a"
