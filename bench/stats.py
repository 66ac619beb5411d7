"""The statistics every benchmark reports: median, quantiles (p90, p99), ratios.

Rules:
1. Values are seconds unless a name says otherwise; `ms` turns a quantile of seconds into
   milliseconds.
2. A value that is not finite (a run that measured nothing: nan, inf) is left out; with none
   left, every figure is nan, never an error, so one empty cell does not sink a table.
3. Quantiles interpolate linearly between the two nearest samples (numpy's default): the
   q-quantile of [1, 2] is 1 + q. `median` is the 0.5-quantile.
4. `ratio(a, b)` is a / b, nan when either is nan or b is 0: "no figure", not a division error.
5. A rate of k out of n comes with its 95% Wilson score interval (`wilson`): it stays inside
   [0, 1] and is honest at k = 0 (0 of 60 is 0-6%, not "0%"), where the normal one is not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def finite(values: Iterable[float]) -> list[float]:
    """The values that are finite numbers (rule 2)."""
    return [float(v) for v in values if math.isfinite(v)]


def quantile(values: Iterable[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) of the finite `values`; nan when there are none."""
    kept = finite(values)
    return float(np.quantile(np.asarray(kept), q)) if kept else float("nan")


def median(values: Iterable[float]) -> float:
    return quantile(values, 0.5)


def p90(values: Iterable[float]) -> float:
    return quantile(values, 0.9)


def p99(values: Iterable[float]) -> float:
    return quantile(values, 0.99)


def ms(values: Iterable[float], q: float) -> float:
    """The q-quantile of `values` (seconds) in milliseconds; nan when there are none."""
    return quantile(values, q) * 1000


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; nan when either is nan or the denominator is 0 (rule 4)."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return float("nan")
    return numerator / denominator


def median_ms(values: Iterable[float]) -> float:
    """The median of `values` (seconds) in milliseconds; nan when there are none."""
    return ms(values, 0.5)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate of k in n (rule 5); (nan, nan) when n is 0."""
    if n <= 0:
        return float("nan"), float("nan")
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)
