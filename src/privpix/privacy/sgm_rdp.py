"""Opacus's RDP accountant for the sampled Gaussian mechanism, the same numbers to the last bit, in a fraction of the
time.

DP-SGD's calibration (:func:`noise_multiplier`) is Opacus's ``get_noise_multiplier``: a bisection over the noise
multiplier z, and at each z the RDP of the sampled Gaussian mechanism at every order α privpix searches (180 of
them), each a series of up to thousands of terms summed in log space, every term computed by a chain of Python calls
(``scipy.special.binom`` and ``log_ndtr`` on one scalar at a time). A fit at a small step count took 1.5 s to
calibrate, and the test suite spent 15 CPU-s there.

Here the terms of each series are computed at once, as numpy arrays: the same IEEE operations on the same values in
the same order (``+ − × ÷`` are correctly rounded either way; ``binom`` and ``log_ndtr`` are ufuncs, whose loop runs
the same C function on each element of an array as on a scalar), with ``math.log`` kept per element where Opacus
calls it (numpy's vectorised log may round differently). The terms that do not depend on z (binomial coefficients,
powers of q) are computed once per (q, α) for the whole bisection. Only the running sum in log space stays a Python
loop, with Opacus's own operations (``math.exp``, ``math.log1p``, ``math.expm1``) in Opacus's order, and the series
stops at the same term. So every ε, and the z the bisection returns, is Opacus's exactly:
``tests/test_sgm_rdp.py`` compares them bit for bit.

Any Opacus release other than :data:`VERIFIED_OPACUS` (whose formulas this module reproduces; constraints.txt pins
it) gets Opacus's own functions, unchanged.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import numpy as np

# The Opacus release whose RDP analysis (opacus.accountants.analysis.rdp) and search (accountants.utils) this module
# reproduces.
VERIFIED_OPACUS = "1.6.0"

_LOG_HALF = math.log(0.5)
_LOG_TWO = math.log(2)
_SQRT_TWO = math.sqrt(2)
_CHUNK = 64  # series terms computed per array pass; most fractional orders stop within the first


@functools.cache
def fast_path_available() -> bool:
    """Whether the installed Opacus is the release this module reproduces (otherwise Opacus's own code runs)."""
    try:
        return metadata.version("opacus") == VERIFIED_OPACUS
    except metadata.PackageNotFoundError:
        return False


def _log_add(logx, logy):
    a, b = min(logx, logy), max(logx, logy)
    if a == -np.inf:  # adding 0
        return b
    return math.log1p(math.exp(a - b)) + b


def _log_sub(logx, logy):
    if logx < logy:
        raise ValueError("The result of subtraction must be non-negative.")
    if logy == -np.inf:  # subtracting 0
        return logx
    if logx == logy:
        return -np.inf  # 0 is represented as -np.inf in the log space.
    try:
        return math.log(math.expm1(logx - logy)) + logy
    except OverflowError:
        return logx


# ------------------------------------------------------------------------------------------ integer orders


@functools.lru_cache(maxsize=512)
def _int_terms(q: float, alpha: int) -> tuple[np.ndarray, np.ndarray]:
    """For i = 0..α: log(binom(α, i)) + i·log q + (α − i)·log(1 − q), and i·i − i (exact integers)."""
    from scipy import special

    i = np.arange(alpha + 1)
    log_binom = np.array([math.log(b) for b in special.binom(alpha, i).tolist()])
    return log_binom + i * math.log(q) + (alpha - i) * math.log(1 - q), i * i - i


def _log_a_int(q: float, sigma, alpha: int) -> float:
    """Opacus's ``_compute_log_a_for_int_alpha``."""
    log_coef, sq = _int_terms(q, alpha)
    log_a = -np.inf
    for s in (log_coef + sq / (2 * (sigma**2))).tolist():  # _log_add written out, as in _log_a_frac
        a, b = min(log_a, s), max(log_a, s)
        log_a = b if a == -np.inf else math.log1p(math.exp(a - b)) + b
    return float(log_a)


# ------------------------------------------------------------------------------------------ fractional orders


@functools.lru_cache(maxsize=1024)
def _frac_terms(q: float, alpha: float, start: int, stop: int):
    """For i in [start, stop): binom(α, i) > 0, j = α − i, log|binom(α, i)| + i·log q + j·log(1 − q) and
    log|binom(α, i)| + j·log q + i·log(1 − q)."""
    from scipy import special

    i = np.arange(start, stop)
    coef = special.binom(alpha, i)
    log_coef = np.array([math.log(abs(c)) for c in coef.tolist()])
    j = alpha - i
    lq, l1q = math.log(q), math.log(1 - q)
    return i, j, coef > 0, log_coef + i * lq + j * l1q, log_coef + j * lq + i * l1q


def _log_a_frac(q: float, sigma, alpha: float) -> float:
    """Opacus's ``_compute_log_a_for_frac_alpha``: the two series summed term by term until both terms fall below
    e^-30, their terms computed ``_CHUNK`` (then twice as many) at a time."""
    from scipy import special

    log_a0, log_a1 = -np.inf, -np.inf
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    scale = _SQRT_TWO * sigma
    var2 = 2 * (sigma**2)
    start, size = 0, _CHUNK
    while True:
        i, j, positive, log_t0, log_t1 = _frac_terms(q, alpha, start, start + size)
        log_e0 = _LOG_HALF + (_LOG_TWO + special.log_ndtr(-((i - z0) / scale) * 2**0.5))
        log_e1 = _LOG_HALF + (_LOG_TWO + special.log_ndtr(-((z0 - j) / scale) * 2**0.5))
        s0 = (log_t0 + (i * i - i) / var2 + log_e0).tolist()
        s1 = (log_t1 + (j * j - j) / var2 + log_e1).tolist()
        # _log_add written out: the loop runs hundreds of thousands of times in one calibration.
        for k, pos in enumerate(positive.tolist()):
            log_s0, log_s1 = s0[k], s1[k]
            if pos:
                a, b = min(log_a0, log_s0), max(log_a0, log_s0)
                log_a0 = b if a == -np.inf else math.log1p(math.exp(a - b)) + b
                a, b = min(log_a1, log_s1), max(log_a1, log_s1)
                log_a1 = b if a == -np.inf else math.log1p(math.exp(a - b)) + b
            else:
                log_a0 = _log_sub(log_a0, log_s0)
                log_a1 = _log_sub(log_a1, log_s1)
            if max(log_s0, log_s1) < -30:
                return _log_add(log_a0, log_a1)
        start, size = start + size, 2 * size


# ------------------------------------------------------------------------------------------ the accountant


def _compute_rdp(q: float, sigma, alpha) -> float:
    if q == 0 or sigma == 0 or q == 1.0 or np.isinf(alpha):
        from opacus.accountants.analysis.rdp import _compute_rdp

        return _compute_rdp(q, sigma, alpha)
    log_a = _log_a_int(q, sigma, int(alpha)) if float(alpha).is_integer() else _log_a_frac(q, sigma, alpha)
    return log_a / (alpha - 1)


def compute_rdp(*, q: float, noise_multiplier: float, steps: int, orders: Sequence[float] | float) -> Any:
    """``opacus.accountants.analysis.rdp.compute_rdp`` (RDP of ``steps`` sampled Gaussian mechanisms at each order
    of ``orders``, an array, or at one float order, a float; may be ``inf``), bit for bit."""
    if not fast_path_available():
        from opacus.accountants.analysis import rdp

        return rdp.compute_rdp(q=q, noise_multiplier=noise_multiplier, steps=steps, orders=orders)
    if isinstance(orders, float):
        return _compute_rdp(q, noise_multiplier, orders) * steps
    return np.array([_compute_rdp(q, noise_multiplier, order) for order in orders]) * steps


def epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, alphas: Sequence[float]) -> float:
    """ε at ``delta`` of ``steps`` sampled Gaussian mechanisms (Poisson rate ``sample_rate``, noise multiplier z),
    searched over the RDP orders ``alphas``: ``RDPAccountant.get_epsilon`` with that history, bit for bit."""
    if not fast_path_available():
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
        acc.history = [(noise_multiplier, sample_rate, steps)]
        return acc.get_epsilon(delta=delta, alphas=alphas)
    from opacus.accountants.analysis import rdp

    # Opacus sums the curves of its history with sum() (0 + curve: -0.0 becomes 0.0); kept, so the bits match.
    curve = sum([compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=steps, orders=alphas)])
    eps, _ = rdp.get_privacy_spent(orders=alphas, rdp=curve, delta=delta)
    return float(eps)


def noise_multiplier(
    *,
    target_epsilon: float,
    target_delta: float,
    sample_rate: float,
    steps: int,
    epsilon_tolerance: float,
    alphas: Sequence[float],
) -> float:
    """``opacus.accountants.utils.get_noise_multiplier`` with the RDP accountant: the upper end z of a bisection
    whose ε lies within ``epsilon_tolerance`` below ``target_epsilon``, bit for bit. Raises Opacus's ValueError
    ("The privacy budget is too low.") where no z up to its bound reaches the target."""
    from opacus.accountants.utils import MAX_SIGMA

    if not fast_path_available():
        from opacus.accountants.utils import get_noise_multiplier

        return get_noise_multiplier(
            target_epsilon=target_epsilon, target_delta=target_delta, sample_rate=sample_rate, steps=steps,
            accountant="rdp", epsilon_tolerance=epsilon_tolerance, alphas=alphas)  # fmt: skip
    # Opacus's search, step for step (its bracket starts at the integers 0 and 10).
    eps_high = float("inf")
    sigma_low: float = 0  # ints, as Opacus's are: 2 * sigma_high stays an int until the bisection halves it
    sigma_high: float = 10
    while eps_high > target_epsilon:
        sigma_high = 2 * sigma_high
        eps_high = epsilon(sigma_high, sample_rate, steps, target_delta, alphas)
        if sigma_high > MAX_SIGMA:
            raise ValueError("The privacy budget is too low.")
    while target_epsilon - eps_high > epsilon_tolerance:
        sigma = (sigma_low + sigma_high) / 2
        eps = epsilon(sigma, sample_rate, steps, target_delta, alphas)
        if eps < target_epsilon:
            sigma_high = sigma
            eps_high = eps
        else:
            sigma_low = sigma
    return sigma_high
