"""Statistics of the benchmark: Student-t confidence intervals (scipy) and percentiles (numpy)."""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np

from ..errors import ParameterError

__all__ = ["t_quantile", "mean_ci", "percentile"]


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t distribution (``t_quantile(0.975, 4) == 2.776...``), by ``scipy.stats.t``."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ParameterError("p/df", (p, df), "0 < p < 1 and df > 0")
    from scipy.stats import t  # imported on first use: scipy.stats takes a while to load

    return float(t.ppf(p, df))


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean and the two-sided t-distribution confidence interval of the mean."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(vals)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "half_width": None, "low": None, "high": None, "confidence": confidence}
    mean = sum(vals) / n
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None, "low": None, "high": None, "confidence": confidence}
    sd = statistics.stdev(vals)
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "low": mean - half, "high": mean + half, "confidence": confidence}


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation, numpy's default) of the values that are not None; None if none."""
    vals = [v for v in values if v is not None]
    return float(np.percentile(vals, q)) if vals else None


_pct = percentile
