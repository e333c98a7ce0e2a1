"""Generalised randomized response (GRR) over a finite domain, as Wang & Chang 2020 use it (eq. 3).

Each of an owner's m features takes values in ``[d] = {0, …, d-1}``. A feature is kept with probability
``p = e^ε / (e^ε + d - 1)`` and otherwise replaced by one of the other ``d - 1`` values uniformly, so that
every output value has probability ``p`` or ``q = 1 / (e^ε + d - 1)`` and ``p / q = e^ε``: ε-LDP per feature.
A vector of m features perturbed independently is (m·ε)-LDP as a whole (sequential composition).

A privacy primitive, as the noises of :mod:`privpix.privacy.noise`: the LDP mechanisms perturb with it, and the data
user's estimators and learners (:mod:`privpix.evaluation.ldp_estimators`, :mod:`privpix.evaluation.ldp_learners`)
read the reports with its probabilities.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from privpix.errors import ParameterError
from privpix.privacy.noise import RNG, SecureRandom, check_rng, randomized_response


def check_epsilon(epsilon: float) -> float:
    """ε > 0, or ``math.inf`` for "no perturbation" (the paper's ε = ∞ ground-truth column)."""
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"epsilon must be a number > 0 or inf, got {epsilon!r}") from None
    if not e > 0:  # also rejects NaN
        raise ParameterError(f"epsilon must be > 0 (or inf for no perturbation), got {epsilon!r}")
    return e


def check_domain(d: int) -> int:
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 2:
        raise ParameterError(f"d (domain size) must be an integer >= 2, got {d!r}")
    return int(d)


def grr_probabilities(d: int, epsilon: float) -> tuple[float, float]:
    """(p, q): the probability of reporting the true value and each particular other value (eq. 3)."""
    d = check_domain(d)
    epsilon = check_epsilon(epsilon)
    if math.isinf(epsilon):
        return 1.0, 0.0
    # Written with e^-ε so that large ε does not overflow.
    q = 1.0 / (math.exp(epsilon) + d - 1) if epsilon < 700 else 0.0
    p = 1.0 / (1.0 + (d - 1) * math.exp(-epsilon))
    return p, q


# How far the seeded sampler's ε (:func:`seeded_sampler_epsilon`) may exceed the stated ε, relatively, before
# grr_perturb refuses it. Its probabilities are eq. 3's rounded to multiples of 2^-24, off by up to one count in
# 2^24: relatively most where a probability is small, at large ε (0.09 % at ε = 12; 0.5 % at ε = 14 for d >= 16;
# from about ε = 16.6 some outputs cannot occur at all) and at a small ε over many values (0.2 % at ε = 0.01 with
# d = 256, 1.4 % with d = 1024). Between, it is within 0.01 % (ε from 0.5 to 8 with d up to 256).
SEEDED_EPSILON_TOLERANCE = 1e-3
_UNIFORMS = 1 << 24  # the float32 uniforms rng.random draws: k·2^-24, k = 0 … 2^24 − 1, each equally likely


@functools.lru_cache(maxsize=256)
def seeded_sampler_epsilon(d: int, epsilon: float) -> float:
    """The ε that :func:`grr_perturb`'s seeded sampler really has for ``d`` and a finite ``epsilon``: the log of
    the largest ratio between its output probabilities, counted exactly over the 2^24 float32 uniforms that decide
    an entry (``math.inf`` where some output can never occur). The count of each replacement is found by bisecting
    on the uniform (the offset it picks grows with it), so this costs d·24 evaluations, not 2^24."""
    p, _ = grr_probabilities(d, epsilon)
    p32, stretch = np.float32(p), np.float32((d - 1) / (1.0 - p)) if p < 1 else np.float32(0)
    kept = min(math.ceil(float(p32) * _UNIFORMS), _UNIFORMS)  # k·2^-24 is exact in float32: below p32 iff k < p32·2^24
    if _UNIFORMS - kept < d - 1:  # fewer uniforms left than replacements: one of them can never be drawn
        return math.inf

    def offset(k: np.ndarray) -> np.ndarray:
        u = (k.astype(np.float64) * 2.0**-24).astype(np.float32)
        return np.minimum(((u - p32) * stretch).astype(np.int64), d - 2)

    # The first uniform at or above p32 whose replacement offset reaches j, for every j = 1 … d − 2 at once.
    targets = np.arange(1, d - 1)
    lo, hi = np.full(d - 2, kept, np.int64), np.full(d - 2, _UNIFORMS, np.int64)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        reached = offset(mid) >= targets
        hi = np.where(reached & (lo < hi), mid, hi)
        lo = np.where(~reached & (lo < hi), mid + 1, lo)
    # Every output's count: the kept value's, then each replacement's (the gaps between consecutive boundaries).
    counts = np.diff(np.concatenate([[0], [kept], lo, [_UNIFORMS]]))
    least = int(counts.min())
    return math.inf if least == 0 else math.log(int(counts.max()) / least)


def value_dtype(d: int) -> np.dtype:
    """The smallest unsigned dtype that holds ``[0, d)``."""
    return np.dtype(np.uint8 if d <= 256 else np.uint16 if d <= 65536 else np.uint32)


def grr_perturb(values: np.ndarray, d: int, epsilon: float, rng: RNG) -> np.ndarray:
    """Perturb every entry of ``values`` (integers in ``[0, d)``, any shape) independently with GRR.

    Returns an array of the same shape in the smallest unsigned dtype holding ``[0, d)``. ``epsilon=inf``
    returns the values unchanged (no privacy).

    With a NumPy ``Generator`` (reproducible research runs) one float32 uniform decides each entry: it is
    kept when the uniform is below p, and otherwise the same uniform, rescaled, picks the replacement among
    the d - 1 others. The probabilities are those of eq. 3 rounded to multiples of 2^-24, so the ratio DP bounds
    is not exactly e^ε: its true ε (:func:`seeded_sampler_epsilon`) is within 0.1 % of ``epsilon``
    (:data:`SEEDED_EPSILON_TOLERANCE`), or the call is refused with a :class:`ParameterError` (a large ε, e.g.
    ε ≥ 14 with d ≥ 16, or a small ε over many values, e.g. ε = 0.01 with d = 256) and the exact sampler is the way
    to that ε. With a
    :class:`~privpix.privacy.noise.SecureRandom` the exact sampler of :func:`privpix.privacy.noise.randomized_response`
    is used, whose ε is never above the stated one.
    """
    check_rng(rng)
    d = check_domain(d)
    epsilon = check_epsilon(epsilon)
    v = np.asarray(values)
    if v.size and (not np.issubdtype(v.dtype, np.integer) or v.min() < 0 or v.max() >= d):
        lo, hi = (v.min(), v.max()) if v.size else (0, 0)
        raise ParameterError(f"values must be integers in [0, {d}), got dtype {v.dtype} range [{lo}, {hi}]")
    dt = value_dtype(d)
    if math.isinf(epsilon):
        return v.astype(dt, copy=True)
    if isinstance(rng, SecureRandom):
        return randomized_response(rng, v, d, epsilon).astype(dt)
    actual = seeded_sampler_epsilon(d, epsilon)
    if actual > epsilon * (1.0 + SEEDED_EPSILON_TOLERANCE):
        raise ParameterError(
            f"epsilon={epsilon:g} over a domain of d={d}: randomized response from a seeded generator (one float32 "
            f"uniform per value) would give ε = {actual:.6g}, not {epsilon:g}: its probabilities are rounded to "
            "multiples of 2^-24, too coarse for a large ε or for a small ε over many values; use the exact sampler "
            "(privpix.privacy.noise.make_rng(secure=True); on the command line, no --seed)"
        )
    p, _ = grr_probabilities(d, epsilon)
    flat = v.astype(dt, copy=False).ravel()
    u = rng.random(flat.size, dtype=np.float32)
    p32 = np.float32(p)
    idx = np.flatnonzero(u >= p32)
    out = flat.copy()
    if idx.size == 0:  # also where p rounds to 1 (ε of about 37 and more): every value is kept
        return out.reshape(v.shape)
    # Given u >= p, (u - p) / (1 - p) is uniform on [0, 1): reuse it to pick one of the d - 1 other values.
    off = ((u[idx] - p32) * np.float32((d - 1) / (1.0 - p))).astype(np.int64)
    np.minimum(off, d - 2, out=off)
    out[idx] = ((flat[idx].astype(np.int64) + 1 + off) % d).astype(dt)
    return out.reshape(v.shape)
