"""Unbiased estimators a data user computes from GRR reports (Wang & Chang 2020, eqs. 13–28).

All functions take the per-feature ε of the reports and the domain size d; counts are over one group of
reports (one class, for the classifiers). ε = inf means the reports are the true values.
"""

from __future__ import annotations

import numpy as np

from privpix.privacy.grr import check_domain, grr_probabilities


def value_counts(reports: np.ndarray, d: int) -> np.ndarray:
    """Observed counts ``Σ_j v``: array (m, d), entry [j, v] = number of reports whose feature j equals v.

    ``reports`` has shape (n, m) with integers in ``[0, d)``.
    """
    d = check_domain(d)
    r = np.asarray(reports)
    if r.ndim != 2:
        raise ValueError(f"reports must have shape (n, m), got {r.shape}")
    m = r.shape[1]
    if d <= 64:  # one pass per value over compact integers beats an int64 bincount index here
        return np.stack([np.count_nonzero(r == v, axis=0) for v in range(d)], axis=1).astype(np.float64)
    flat = (np.arange(m, dtype=np.int64) * d)[None, :] + r.astype(np.int64)
    return np.bincount(flat.ravel(), minlength=m * d).reshape(m, d).astype(np.float64)


def frequency_estimate(counts: np.ndarray, n: int, d: int, epsilon: float) -> np.ndarray:
    """ĉ_j(v) = (Σ_j v − n q) / (p − q) (eq. 13): unbiased for n·f_{v,j}, the true count of value v.

    ``counts`` is the observed count array (any shape whose last axis is the d values); ``n`` the number
    of reports counted. Estimates can be negative; they always sum to n over v.
    """
    p, q = grr_probabilities(d, epsilon)
    return (np.asarray(counts, dtype=np.float64) - n * q) / (p - q)


def frequency_variance(n: int, f: np.ndarray | float, d: int, epsilon: float) -> np.ndarray:
    """Var[ĉ_j(v)] of eq. 19: n((d − 2 + e^ε)/(e^ε − 1)^2 + f(d − 2)/(e^ε − 1)), f the true proportion."""
    d = check_domain(d)
    p, q = grr_probabilities(d, epsilon)
    # Eq. 18 form, which is eq. 19 rewritten and stays finite for large ε.
    f = np.asarray(f, dtype=np.float64)
    return n * q * (1 - q) / (p - q) ** 2 + n * f * (1 - p - q) / (p - q)


def mean_estimate(counts: np.ndarray, n: int, d: int, epsilon: float) -> np.ndarray:
    """μ̂_j = Σ_v v ĉ_j(v) / n (eq. 20), unbiased for the mean of feature j. ``counts`` has shape (..., d)."""
    c = frequency_estimate(counts, n, d, epsilon)
    return c @ np.arange(d, dtype=np.float64) / n


def mean_estimate_rr(counts: np.ndarray, n: int, d: int, epsilon: float) -> np.ndarray:
    """μ̂_j^rr = Σ_v v ĉ_j(v) / Σ_v ĉ_j(v) (eq. 28): the ratio form, approximately unbiased (Taylor).

    With GRR the estimated counts always sum to n exactly, so this equals :func:`mean_estimate`; it is
    kept, as in the paper, for estimators whose counts are post-processed (e.g. clipped at zero).
    """
    c = frequency_estimate(counts, n, d, epsilon)
    return c @ np.arange(d, dtype=np.float64) / c.sum(axis=-1)


def mean_variance(n: int, f: np.ndarray, d: int, epsilon: float) -> np.ndarray:
    """Var[μ̂_j] = Σ_v v² Var[ĉ_j(v)] / n² (eq. 27), as the paper writes it.

    ``f`` has shape (..., d): the true proportions of each value. The paper's formula ignores the
    covariance between the counts of different values (they are multinomial), so it is an approximation;
    :func:`mean_variance_exact` gives the exact value.
    """
    v2 = np.arange(d, dtype=np.float64) ** 2
    return frequency_variance(n, f, d, epsilon) @ v2 / n**2


def mean_variance_exact(n: int, f: np.ndarray, d: int, epsilon: float) -> np.ndarray:
    """Exact Var[μ̂_j] for n fixed owners whose true values have proportions ``f`` (shape (..., d)).

    Reports are independent given the true values, so Var = Σ_i Var[y_i | x_i] / (n (p − q))², with
    E[y | x] = p x + q (S₁ − x) and E[y² | x] = p x² + q (S₂ − x²), S_k = Σ_v v^k.
    """
    p, q = grr_probabilities(d, epsilon)
    f = np.asarray(f, dtype=np.float64)
    v = np.arange(d, dtype=np.float64)
    s1, s2 = v.sum(), (v**2).sum()
    mean_y = p * v + q * (s1 - v)
    var_y = p * v**2 + q * (s2 - v**2) - mean_y**2  # Var[y | x = v], one entry per v
    return n * (f @ var_y) / (n * (p - q)) ** 2
