"""Every random draw in privpix goes through this module.

Two modes, chosen with :func:`make_rng`:

* **reproducible** (default): a seeded :class:`numpy.random.Generator`. Same seed, same release. For research
  runs, tests and benchmarks. Floating-point samplers are NumPy's.
* **secure**: :class:`SecureRandom`, fed by the operating system's CSPRNG (``os.urandom``); cannot be seeded.
  The discrete samplers (discrete Laplace, generalised randomized response, exponential mechanism) are *exact*:
  compiled kernels (:mod:`privpix.privacy.noise_kernels`) that compare CSPRNG bits with exact binary expansions of
  rational numbers and of exp(-v·c) (Canonne, Kamath & Steinke 2020), so no floating-point artefact can leak the
  input. Continuous Laplace noise is produced as discrete Laplace noise on a fine grid, and :func:`add_laplace`
  snaps the data to that grid first, which keeps the guarantee exact. :func:`discrete_gaussian` is exact in both
  modes (its acceptance step reads the leading bits of exp(-γ) from a float bracket 2**16 times wider than the
  float error, and the rest in exact arithmetic). The continuous Gaussian in secure mode is a floating-point
  Box–Muller transform of CSPRNG bits: use it for knob-style noise, not where an exact (ε, δ) proof is needed.

All samplers take ``rng`` first. Scales are in the units of the data they are added to.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np

from privpix.errors import ParameterError, check_positive

__all__ = [
    "RNG",
    "SecureRandom",
    "add_gaussian",
    "add_laplace",
    "discrete_gaussian",
    "discrete_laplace",
    "exponential_mechanism",
    "exponential_mechanism_rows",
    "gaussian",
    "is_secure",
    "laplace",
    "make_rng",
    "randomized_response",
]

# Rational approximations use this denominator (2**20): rounding is always in the conservative direction.
_DEN = 1 << 20
_U64 = np.uint64


class SecureRandom:
    """Random source backed by the OS CSPRNG with exact uniform integers (rejection sampling on raw bits)."""

    secure = True

    def __init__(self) -> None:
        self._buf = np.empty(0, dtype=_U64)

    def bits64(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit words."""
        return np.frombuffer(os.urandom(8 * int(n)), dtype=_U64).copy()

    def integers(self, high: np.ndarray | int, size: int | None = None) -> np.ndarray:
        """Exactly uniform integers in ``[0, high)`` (``high`` >= 1, < 2**63), elementwise if ``high`` is an array."""
        h = np.asarray(high, dtype=_U64)
        if size is not None:
            h = np.broadcast_to(h, (int(size),))
        h = h.ravel().copy()
        if h.size and int(h.min()) < 1:
            raise ParameterError("integers: high must be >= 1")
        # Smear the top bit of high-1 down to get the smallest all-ones mask covering [0, high).
        m = h - _U64(1)
        for s in (1, 2, 4, 8, 16, 32):
            m |= m >> _U64(s)
        out = np.empty_like(h)
        todo = np.arange(h.size)
        while todo.size:
            cand = self.bits64(todo.size) & m[todo]
            ok = cand < h[todo]
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
        return out.astype(np.int64)

    def bytes(self, n: int) -> bytes:
        """``n`` uniform random bytes (the same call as ``numpy.random.Generator.bytes``)."""
        return os.urandom(int(n))

    def random(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform floats in [0, 1) with 53 random bits each."""
        n = int(np.prod(size))
        return ((self.bits64(n) >> _U64(11)).astype(np.float64) * 2.0**-53).reshape(size)


RNG = np.random.Generator | SecureRandom


def rng_kind(seed: int | None, secure: bool) -> str:
    """How a release drew its noise, as its manifest and plan record it: ``"secure"`` (exact samplers on the OS
    CSPRNG), ``"seeded"`` (a research run) or ``"os-seeded"`` (floating point, fresh OS entropy)."""
    return "secure" if secure else ("seeded" if seed is not None else "os-seeded")


def make_rng(seed: int | None = None, *, secure: bool = False) -> RNG:
    """Return the random source for a release.

    Args:
        seed: integer seed for reproducible mode. ``None`` draws fresh OS entropy.
        secure: use :class:`SecureRandom` (OS CSPRNG, exact discrete samplers). It cannot be seeded.
    """
    if secure:
        if seed is not None:
            raise ParameterError("seed: secure mode draws from the OS CSPRNG and cannot be seeded")
        return SecureRandom()
    if seed is not None and (not isinstance(seed, int | np.integer) or seed < 0):
        raise ParameterError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.default_rng(seed)


def torch_seed(rng: RNG | None = None) -> int:
    """A seed for a torch ``Generator`` (the neural mechanisms' noise): drawn from ``rng`` when it is a seeded
    NumPy Generator, so the same release seed gives the same torch noise; from the OS CSPRNG otherwise
    (secure mode, or no rng)."""
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**62))
    return int.from_bytes(os.urandom(8), "little") >> 2


def is_secure(rng: RNG) -> bool:
    return isinstance(rng, SecureRandom)


def check_rng(rng: object) -> None:
    """Refuse anything but a numpy Generator or a :class:`SecureRandom` as a noise source."""
    if not isinstance(rng, np.random.Generator | SecureRandom):
        raise ParameterError(
            f"rng must be a numpy.random.Generator or privpix.privacy.noise.SecureRandom (see make_rng), "
            f"got {type(rng)}"
        )


def _size(size: int | tuple[int, ...] | None) -> tuple[int, ...]:
    if size is None:
        return ()
    if isinstance(size, int | np.integer):
        return (int(size),)
    return tuple(int(s) for s in size)


# ---------------------------------------------------------------------------------------------------------
# Exact building blocks. The samplers themselves are compiled kernels (privpix.privacy.noise_kernels), imported on first
# use so that importing privpix does not load numba.

# Largest discrete Laplace scale and discrete Gaussian σ of the exact samplers: every kernel quantity fits in int64.
_MAX_EXACT_SCALE = float(1 << 36)
_MAX_EXACT_SIGMA = float(1 << 40)


def _kernels():
    from privpix.privacy import noise_kernels

    return noise_kernels


def _word_source(rng: RNG):
    """The rng's uniform 64-bit words: the OS CSPRNG (secure) or the seeded Generator (reproducible)."""
    if isinstance(rng, SecureRandom):
        return rng.bits64
    return lambda n: rng.integers(0, 2**64, size=int(n), dtype=_U64)


def _rational_at_least(x: float, max_den: int = _DEN) -> tuple[int, int]:
    """(p, q) with p/q >= x and p/q - x <= 1/q: a conservative rational for a noise scale."""
    fr = Fraction(x)
    p = math.ceil(fr * max_den)
    g = math.gcd(p, max_den)
    return p // g, max_den // g


def _rational_at_most(x: float, max_den: int = _DEN) -> tuple[int, int]:
    """(p, q) with p/q <= x, within 1/q: a conservative rational for an ε."""
    fr = Fraction(x)
    p = math.floor(fr * max_den)
    g = math.gcd(p, max_den) if p else max_den
    return p // g, max_den // g


# ---------------------------------------------------------------------------------------------------------
# Public samplers.


def laplace(rng: RNG, scale: float, size: int | tuple[int, ...] | None = None, *, grid: float = 2.0**-16):
    """Laplace(0, scale) noise, density exp(-|x|/scale) / (2·scale).

    In secure mode the noise is ``grid · DiscreteLaplace(scale/grid)`` with the discrete scale rounded up, an
    exact sample on the lattice ``grid·Z``; it is private only for data snapped to the same lattice, which
    :func:`add_laplace` does for you.
    """
    check_rng(rng)
    scale = check_positive("scale", scale, allow_zero=True)
    shape = _size(size)
    if scale == 0:
        return np.zeros(shape)
    if isinstance(rng, SecureRandom):
        return grid * discrete_laplace(rng, scale / grid, shape).astype(np.float64)
    return rng.laplace(0.0, scale, shape)


def gaussian(rng: RNG, sigma: float, size: int | tuple[int, ...] | None = None) -> np.ndarray:
    """Gaussian N(0, sigma²) noise (secure mode: Box–Muller on CSPRNG floats, not an exact sampler)."""
    check_rng(rng)
    sigma = check_positive("sigma", sigma, allow_zero=True)
    shape = _size(size)
    if sigma == 0:
        return np.zeros(shape)
    if isinstance(rng, SecureRandom):
        n = int(np.prod(shape)) if shape else 1
        u1 = 1.0 - rng.random(n)  # (0, 1]: log is finite
        u2 = rng.random(n)
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        return sigma * z.reshape(shape)
    return rng.normal(0.0, sigma, shape)


def discrete_laplace(rng: RNG, scale: float, size: int | tuple[int, ...] | None = None) -> np.ndarray:
    """Two-sided geometric noise on the integers: P[z] ∝ exp(-|z| / scale).

    Secure mode samples exactly (CKS 2020, compiled) at the rational scale p/q >= ``scale`` with q = 2**20 (or a
    divisor), rounded up by less than 2**-20, so the privacy guarantee computed from ``scale`` holds; ``scale``
    must be at most 2**36 there. Reproducible mode is a difference of two NumPy geometrics (not exact).
    """
    check_rng(rng)
    scale = check_positive("scale", scale)
    shape = _size(size)
    n = int(np.prod(shape)) if shape else 1
    if isinstance(rng, SecureRandom):
        if scale > _MAX_EXACT_SCALE:
            raise ParameterError(f"scale must be <= 2**36 for exact (secure) discrete Laplace noise, got {scale!r}")
        p, q = _rational_at_least(scale)
        return _kernels().discrete_laplace(rng.bits64, p, q, n).reshape(shape)
    prob = -math.expm1(-1.0 / scale)  # 1 - exp(-1/scale), accurate for large scales
    return (rng.geometric(prob, n) - rng.geometric(prob, n)).reshape(shape).astype(np.int64)


def discrete_gaussian(rng: RNG, sigma: float, size: int | tuple[int, ...] | None = None) -> np.ndarray:
    """Exact discrete Gaussian noise on the integers: P[z] ∝ exp(-z² / (2σ²)) (Canonne, Kamath & Steinke 2020).

    Exact in both modes, for the float σ given (σ < 2**40): the same compiled sampler reads the OS CSPRNG
    (secure) or the seeded Generator's 64-bit words (reproducible; the same seed gives the same noise). Discrete
    Laplace candidates are exact; each is accepted by comparing random bits with the binary expansion of its
    acceptance probability exp(-γ) (γ exact, from the float σ). The leading bits of that expansion are read off a
    double-precision bracket of half-width 2**-32, which assumes the double-precision exp(-γ) is within 2**-33 of
    the true value (its error is below 2**-49); further bits, needed about once in 10**8 candidates, are computed
    in exact rational arithmetic. Its Rényi divergences for an integer shift are at most those of the continuous
    Gaussian with the same σ (CKS 2020), so a Gaussian accountant's RDP/zCDP bound holds for it; the analytic
    (ε, δ) of the continuous Gaussian is not claimed. int64 output."""
    check_rng(rng)
    sigma = check_positive("sigma", sigma)
    if sigma >= _MAX_EXACT_SIGMA:
        raise ParameterError(f"sigma must be < 2**40 for the exact discrete Gaussian, got {sigma!r}")
    shape = _size(size)
    n = int(np.prod(shape)) if shape else 1
    return _kernels().discrete_gaussian(_word_source(rng), float(sigma), n).reshape(shape)


# add_laplace's lattice in secure mode, PIXEL_GRID_STEPS points per unit: it holds every 8-bit pixel level, and
# the mean of any 1, 2, 4, …, 64 of them.
PIXEL_GRID_STEPS = 255 * 64
PIXEL_GRID = 1 / PIXEL_GRID_STEPS


def add_laplace(values: np.ndarray, scale: float | np.ndarray, rng: RNG, *, grid: float = PIXEL_GRID):
    """``values + Laplace(scale)``; ``scale`` may be an array broadcast against ``values``.

    Secure mode first snaps ``values`` to the lattice ``grid·Z`` (the default grid holds every 8-bit pixel
    level exactly) and adds exact lattice noise, so the guarantee computed for ``scale`` holds exactly.
    """
    check_rng(rng)
    values = np.asarray(values, dtype=np.float64)
    scale_arr = np.asarray(scale, dtype=np.float64)
    sc = np.broadcast_to(scale_arr, values.shape)
    # Checked before broadcasting (same verdict): a broadcast check would allocate arrays as large as the data.
    if values.size and (not np.all(np.isfinite(scale_arr)) or np.any(scale_arr < 0)):
        raise ParameterError("scale must be finite and >= 0")
    if not isinstance(rng, SecureRandom):
        if values.ndim == 0:
            return values + rng.laplace(0.0, 1.0, values.shape) * sc
        # In place on the one noise array: noise·scale + values equals values + noise·scale bit for bit.
        noise = rng.laplace(0.0, 1.0, values.shape)
        noise *= sc
        noise += values
        return noise
    # Value and noise are added as whole lattice steps (integers, exact in float64 below 2^53) and scaled once: the
    # output then depends on their sum only. Scaling each first, fl(k·g) + fl(z·g), made its low-order bits depend
    # on the value beyond the noisy one (a third of random pairs with the same sum came out different in float64),
    # the kind of leak the exact sampler is there to close (Mironov 2012).
    steps = np.round(values / grid).ravel()
    flat_sc = sc.ravel()
    for s in np.unique(flat_sc):
        if s == 0:
            continue
        idx = np.flatnonzero(flat_sc == s)
        steps[idx] += discrete_laplace(rng, s / grid, idx.size)
    return (steps * grid).reshape(values.shape)


def add_gaussian(values: np.ndarray, sigma: float, rng: RNG) -> np.ndarray:
    """``values + N(0, sigma²)`` elementwise."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0:
        return values + gaussian(rng, sigma, values.shape)
    noise = np.asarray(gaussian(rng, sigma, values.shape), dtype=np.float64)
    noise += values  # in place; addition commutes exactly, so the values equal values + noise
    return noise


def randomized_response(rng: RNG, values: np.ndarray, d: int, epsilon: float) -> np.ndarray:
    """Generalised randomized response over ``[d] = {0, …, d-1}`` with ε per value (ε-LDP per value).

    Each value is kept with probability e^ε / (e^ε + d - 1) and otherwise replaced by one of the other d - 1
    values uniformly. For d = 2 this is binary randomized response. Secure mode samples exactly (rejection
    from a uniform proposal with exact Bernoulli(e^-ε') acceptance), with ε' <= ε the largest multiple of
    2**-20 not above ε, so the stated ε holds.
    """
    check_rng(rng)
    epsilon = check_positive("epsilon", epsilon)
    if not isinstance(d, int | np.integer) or d < 2:
        raise ParameterError(f"d must be an integer >= 2, got {d!r}")
    v = np.asarray(values)
    if v.size and (not np.issubdtype(v.dtype, np.integer) or v.min() < 0 or v.max() >= d):
        raise ParameterError(f"values must be integers in [0, {d}), got range [{v.min()}, {v.max()}]")
    v = v.astype(np.int64)
    if isinstance(rng, SecureRandom):
        if d >= 1 << 62 or epsilon > _MAX_EXACT_SCALE:
            raise ParameterError(f"secure mode needs d < 2**62 and epsilon <= 2**36, got d={d}, epsilon={epsilon!r}")
        p, q = _rational_at_most(epsilon)
        return _kernels().randomized_response(rng.bits64, v, int(d), p, q).reshape(v.shape)
    keep_p = 1.0 / (1.0 + (d - 1) * math.exp(-epsilon))
    keep = rng.random(v.shape) < keep_p
    other = (v + 1 + rng.integers(0, d - 1, v.shape)) % d
    return np.where(keep, v, other)


def exponential_mechanism(
    rng: RNG, scores: np.ndarray, epsilon: float, sensitivity: float, size: int | None = None
) -> np.ndarray | int:
    """Index i drawn with probability ∝ exp(ε · scores[i] / (2 · sensitivity)) (McSherry–Talwar): ε-DP when
    ``sensitivity`` bounds the change of any score between neighbours.

    Secure mode samples exactly by rejection from a uniform proposal, with each exponent rounded to a
    multiple of 2**-20; this changes the privacy loss by at most 4·2**-20.
    """
    check_rng(rng)
    epsilon = check_positive("epsilon", epsilon)
    sensitivity = check_positive("sensitivity", sensitivity)
    u = np.asarray(scores, dtype=np.float64).ravel()
    if u.size == 0 or not np.all(np.isfinite(u)):
        raise ParameterError("scores must be a non-empty array of finite numbers")
    gamma = epsilon * (u.max() - u) / (2.0 * sensitivity)  # >= 0, 0 at the best candidate
    n_draws = 1 if size is None else int(size)
    if isinstance(rng, SecureRandom):
        if gamma.max() > _MAX_EXACT_SCALE:  # the exponents' numerators must fit in int64
            raise ParameterError("scores: epsilon·(max - min)/(2·sensitivity) must be <= 2**36 in secure mode")
        g_num = np.round(gamma * _DEN).astype(np.int64)
        out = _kernels().exponential(rng.bits64, g_num, _DEN, n_draws)
    else:
        w = np.exp(-gamma)
        out = rng.choice(u.size, size=n_draws, p=w / w.sum())
    return int(out[0]) if size is None else out


def exponential_mechanism_rows(
    rng: RNG, scores: np.ndarray, epsilon: float, sensitivity: np.ndarray, lengths: np.ndarray | None = None
) -> np.ndarray:
    """One independent exponential-mechanism draw per row of ``scores`` (n, k): index i of row b with
    probability ∝ exp(ε · scores[b, i] / (2 · sensitivity[b])), over the first ``lengths[b]`` candidates.

    Seeded generators draw all rows at once (inverse CDF); secure mode calls the exact sampler of
    :func:`exponential_mechanism` row by row.
    """
    check_rng(rng)
    epsilon = check_positive("epsilon", epsilon)
    u = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    n, k = u.shape
    sens = np.broadcast_to(np.asarray(sensitivity, dtype=np.float64), (n,))
    if np.any(~np.isfinite(sens)) or np.any(sens <= 0):
        raise ParameterError("sensitivity must be finite and > 0 for every row")
    lengths = np.full(n, k) if lengths is None else np.asarray(lengths, dtype=np.int64)
    if np.any(lengths < 1) or np.any(lengths > k):
        raise ParameterError(f"lengths must be in [1, {k}]")
    valid = np.arange(k)[None, :] < lengths[:, None]
    if not np.all(np.isfinite(u[valid])):
        raise ParameterError("scores must be finite")
    if isinstance(rng, SecureRandom):
        return np.array(
            [exponential_mechanism(rng, u[b, : lengths[b]], epsilon, float(sens[b])) for b in range(n)], dtype=np.int64
        )
    best = np.where(valid, u, -np.inf).max(axis=1, keepdims=True)
    w = np.where(valid, np.exp(-epsilon * (best - np.where(valid, u, best)) / (2.0 * sens[:, None])), 0.0)
    cdf = np.cumsum(w, axis=1)
    draw = rng.random(n) * cdf[:, -1]
    idx = (cdf <= draw[:, None]).sum(axis=1)
    return np.minimum(idx, lengths - 1)
