"""Pure statistics for the report: percentiles, summaries, ratios.

Kept free of I/O so the numbers a report prints can be unit-tested against hand-made data.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TypedDict


class Summary(TypedDict):
    n: int
    p50: float
    p95: float
    max: float
    mean: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default), so p50 of an even count is the midpoint."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or s[lo] == s[hi]:
        return s[lo]
    if math.isinf(s[hi]):  # "never" (a timeout counted as infinite) stays infinite
        return s[hi]
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarise(values: Sequence[float]) -> Summary | None:
    if not values:
        return None
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def median(values: Sequence[float | None]) -> float | None:
    """Median of the measured values; None when nothing was measured."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference; None when either is missing or the reference is zero."""
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference


def rate_per_minute(count: float, seconds: float, per: int = 1) -> float | None:
    """Events per minute (and per ``per`` objects) over a window of ``seconds``."""
    if seconds <= 0 or per <= 0:
        return None
    return count / per / (seconds / 60.0)


def growth(first: float | None, second: float | None) -> float | None:
    """second / first for two halves of a window: > 1 means the rate grew."""
    if first is None or second is None:
        return None
    if first <= 0:
        return None if second <= 0 else math.inf
    return second / first
