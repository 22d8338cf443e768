"""Mean ± std over seeds: the one function behind every results table (README, results.csv).

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
    """A table cell of ``values``: ``format_mean_std`` of ``mean_std(scale * values)``."""
    return format_mean_std(*mean_std(scale * v for v in values), scale=1.0, digits=digits)
