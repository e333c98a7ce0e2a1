"""Goodness-of-fit tests for privpix's samplers, shared by the test suite and benchmarks/noise_false_alarms.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats


def pooled_chisquare_pvalue(
    samples: np.ndarray, pmf: Callable[[np.ndarray], np.ndarray], *, min_expected: float = 5.0
) -> float:
    """χ² p-value of integer ``samples`` against a distribution symmetric about 0 with probability mass ``pmf``.

    The central bins −K…K are the widest range in which every bin *and* each pooled tail (below −K, above K)
    expects at least ``min_expected`` counts, the usual validity condition of the χ² approximation. Tail bins
    with tiny expected counts are what made an unpooled test raise false alarms far above its nominal level.
    """
    x = np.asarray(samples)
    n = len(x)
    if n == 0:
        raise ValueError("no samples")
    k = 0
    while True:
        nxt = k + 1
        p_mid = pmf(np.array([nxt]))[0]
        support = np.arange(-nxt, nxt + 1)
        tail = (1.0 - pmf(support).sum()) / 2
        if n * p_mid < min_expected or n * tail < min_expected:
            break
        k = nxt
    support = np.arange(-k, k + 1)
    p = pmf(support)
    tail = max((1.0 - p.sum()) / 2, 0.0)
    counts = np.bincount(np.clip(x, -k - 1, k + 1) + k + 1, minlength=2 * k + 3)
    expected = np.r_[tail, p, tail] * n
    keep = expected > 0
    return float(stats.chisquare(counts[keep], expected[keep] * counts[keep].sum() / expected[keep].sum()).pvalue)


def discrete_laplace_pmf(scale: float) -> Callable[[np.ndarray], np.ndarray]:
    """P(X = k) ∝ exp(−|k| / scale) on the integers."""
    a = np.exp(-1.0 / scale)
    norm = (1 - a) / (1 + a)
    return lambda k: norm * a ** np.abs(np.asarray(k))


def discrete_gaussian_pmf(sigma: float) -> Callable[[np.ndarray], np.ndarray]:
    """P(X = k) ∝ exp(−k² / (2σ²)) on the integers, normalised over ±(12σ + 12) (the rest is below 1e-30)."""
    half = int(12 * sigma) + 12
    norm = float(np.exp(-(np.arange(-half, half + 1) ** 2) / (2 * sigma**2)).sum())
    return lambda k: np.exp(-(np.asarray(k, dtype=np.float64) ** 2) / (2 * sigma**2)) / norm
