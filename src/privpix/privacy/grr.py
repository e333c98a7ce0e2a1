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


def value_dtype(d: int) -> np.dtype:
    """The smallest unsigned dtype that holds ``[0, d)``."""
    return np.dtype(np.uint8 if d <= 256 else np.uint16 if d <= 65536 else np.uint32)


def grr_perturb(values: np.ndarray, d: int, epsilon: float, rng: RNG) -> np.ndarray:
    """Perturb every entry of ``values`` (integers in ``[0, d)``, any shape) independently with GRR.

    Returns an array of the same shape in the smallest unsigned dtype holding ``[0, d)``. ``epsilon=inf``
    returns the values unchanged (no privacy).

    With a NumPy ``Generator`` (reproducible research runs) one float32 uniform decides each entry: it is
    kept when the uniform is below p, and otherwise the same uniform, rescaled, picks the replacement among
    the d - 1 others. The probabilities are those of eq. 3 up to float32 rounding (< 2**-24). With a
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
