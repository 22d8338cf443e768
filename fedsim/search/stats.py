"""Mean ± std over seeds: the one function behind every results table (README, results.csv);
the 95 % t interval of a mean, and paired differences between methods (run on the same seeds,
or per client pooled over seeds) with their interval and a paired t test (``fedsim compare``).

The std is the sample std (ddof 1, as ``statistics.stdev``): seeds are a sample of the runs one
could make. With a single value it is undefined (nan) and a table cell shows the mean alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def mean_std(values: Iterable[float]) -> tuple[float, float]:
    """Mean and sample std (ddof 1) of the finite values; nan where undefined."""
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    mean = float(np.mean(finite))
    return mean, float(np.std(finite, ddof=1)) if len(finite) > 1 else math.nan


def format_mean_std(mean: float, std: float, scale: float = 100.0, digits: int = 2) -> str:
    """``"mean ± std"`` times ``scale`` (percent by default); the mean alone when the std is
    nan (one seed), ``n/a`` when the mean is."""
    if math.isnan(mean):
        return "n/a"
    if math.isnan(std):
        return f"{scale * mean:.{digits}f}"
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def mean_std_cell(values: Iterable[float], scale: float = 100.0, digits: int = 2) -> str:
    """A table cell of ``values``: ``format_mean_std`` of ``mean_std(scale * values)``;
    values that are no number (a run without this metric: None) are left out."""
    numbers = (scale * v for v in values if isinstance(v, (int, float)))
    return format_mean_std(*mean_std(numbers), scale=1.0, digits=digits)


def t_interval(values: Iterable[float], level: float = 0.95) -> tuple[float, float]:
    """The ``level`` confidence interval of the mean of the finite ``values``: mean ± t *
    std / sqrt(n), t the Student quantile with n - 1 degrees of freedom (scipy); (nan, nan)
    with fewer than two values."""
    from scipy import stats

    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if len(finite) < 2:
        return math.nan, math.nan
    mean, std = mean_std(finite)
    half = float(stats.t.ppf(0.5 + level / 2, len(finite) - 1)) * std / math.sqrt(len(finite))
    return mean - half, mean + half


PAIRED_TEST = "paired t test (scipy.stats.ttest_rel, two-sided)"


def mean_difference(differences: Iterable[float], level: float = 0.95) -> dict[str, float]:
    """Paired ``differences`` (one per pair): their count, mean, ``level`` interval
    (``t_interval``) and the two-sided p-value of the paired t test, the one-sample t test
    of the differences against 0 (what ``ttest_rel`` computes; nan with fewer than two or
    when every difference is equal)."""
    from scipy import stats

    diffs = [float(d) for d in differences if math.isfinite(float(d))]
    mean = float(np.mean(diffs)) if diffs else math.nan
    lo, hi = t_interval(diffs, level)
    p = math.nan
    if len(diffs) >= 2 and np.ptp(diffs) > 0:
        p = float(stats.ttest_1samp(diffs, 0.0).pvalue)
    return {"n": len(diffs), "mean": mean, "lo": lo, "hi": hi, "p": p}


def paired_difference(
    a: Iterable[float], b: Iterable[float], level: float = 0.95
) -> dict[str, float]:
    """``a - b`` over paired seeds: ``mean_difference`` of the finite pairs (the mean, its
    ``level`` interval and the ``PAIRED_TEST``'s p-value)."""
    pairs = [(float(x), float(y)) for x, y in zip(a, b, strict=True)]
    return mean_difference([x - y for x, y in pairs if math.isfinite(x) and math.isfinite(y)],
                           level)  # fmt: skip


def supported(difference: dict[str, float], alpha: float = 0.05) -> bool:
    """Whether the seeds support a difference: the paired test's p below ``alpha`` (its
    interval at level 1 - alpha then excludes 0)."""
    return bool(math.isfinite(difference["p"]) and difference["p"] < alpha)
