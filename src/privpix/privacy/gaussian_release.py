"""One Gaussian release of a sum of bounded-norm rows: the calibration and the two ways of adding the noise.

A dataset-level mechanism (a DP synthesizer's mean embedding, later a covariance) releases Σ_i u_i once, where
every private record's row u_i has L2 norm ≤ 1 by construction. Replacing one record moves the sum by at most 2
in L2, whatever the data. Two modes:

* **floating point** (default): the float64 sum plus N(0, σ²) with z = σ/Δ from the *analytic* Gaussian
  mechanism (Balle & Wang 2018) as Google's ``dp-accounting`` computes it (:func:`analytic_noise_multiplier`).
* **exact** (``secure``): every row is rounded to the lattice Z^w / s (s = 2^bits) and the rows are summed as
  integers (:class:`FixedPointSum`: exact, so the result does not depend on the order or the batching of the
  rows); exact discrete Gaussian noise (:func:`privpix.privacy.noise.discrete_gaussian`) is added to the integer sum.
  The discrete Gaussian has the Rényi divergences of the continuous one for integer shifts (Canonne, Kamath & Steinke
  2020) but not its analytic (ε, δ) curve, so z comes from ``dp-accounting``'s RDP accountant
  (:func:`rdp_noise_multiplier`): a few percent more noise, and a proof that covers the samples actually drawn.

Rounding can lengthen a row: ‖round(s·u)‖₂ ≤ s·‖u‖₂ + sqrt(w)/2 for a row of w values (each moves by ≤ 1/2), so
the integer sensitivity is 2·(s + sqrt(w)/2), not 2s. Rows are first scaled down to norm ≤ 1 if float rounding
left them a hair above it, so the bound holds for any input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privpix.errors import ParameterError
from privpix.privacy.noise import RNG, discrete_gaussian

ANALYTIC = "dp-accounting analytic Gaussian mechanism (get_sigma_gaussian / get_epsilon_gaussian)"
RDP = "dp-accounting RDP accountant (GaussianDpEvent), valid for the discrete Gaussian (CKS 2020)"


def _check(epsilon: float, delta: float) -> None:
    if not (epsilon > 0 and 0 < delta < 1):
        raise ParameterError(f"the Gaussian mechanism needs epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")


def analytic_noise_multiplier(epsilon: float, delta: float) -> float:
    """z = σ/Δ of the (ε, δ)-DP continuous Gaussian mechanism with L2 sensitivity Δ: dp-accounting's analytic
    calibration, rounded up until dp-accounting's own ε for z is at most ``epsilon``."""
    import dp_accounting

    _check(epsilon, delta)
    z = float(dp_accounting.get_sigma_gaussian(epsilon, delta))
    while dp_accounting.get_epsilon_gaussian(z, delta) > epsilon:
        z *= 1 + 1e-12
    return z


def analytic_epsilon(z: float, delta: float) -> float:
    """ε at ``delta`` of one continuous Gaussian release with noise multiplier ``z`` (dp-accounting, analytic)."""
    import dp_accounting

    return float(dp_accounting.get_epsilon_gaussian(z, delta))


def rdp_epsilon(z: float, delta: float) -> float:
    """ε at ``delta`` of one Gaussian (or discrete Gaussian) release with noise multiplier ``z``, from its RDP curve
    (dp-accounting's RdpAccountant and its RDP-to-(ε, δ) conversion)."""
    import dp_accounting
    from dp_accounting import rdp

    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(z))
    return float(acc.get_epsilon(delta))


def rdp_noise_multiplier(epsilon: float, delta: float) -> float:
    """The smallest z (to a relative 1e-9, rounded up) whose RDP-derived ε at ``delta`` is at most ``epsilon``."""
    _check(epsilon, delta)
    lo = analytic_noise_multiplier(epsilon, delta)  # RDP is never tighter than the analytic curve
    hi = lo * 2
    while rdp_epsilon(hi, delta) > epsilon:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if rdp_epsilon(mid, delta) <= epsilon else (mid, hi)
    return hi


class FixedPointSum:
    """Exact integer sums of rows of L2 norm ≤ 1, each row rounded to Z^width / 2^bits and added into one of
    ``groups`` accumulators (``total``, int64 (groups, width)).

    ``bound`` is the largest L2 norm one row can have after rounding, s + sqrt(width)/2 with s = 2^bits: replacing
    one row moves ``total`` by at most 2·bound, whichever groups the two rows fall in."""

    def __init__(self, groups: int, width: int, bits: int = 20) -> None:
        if not 1 <= bits <= 30:
            raise ParameterError(f"bits must be in 1..30 (int64 sums of up to 2^32 rows), got {bits}")
        self.scale = 1 << bits
        self.width = int(width)
        self.total = np.zeros((int(groups), self.width), dtype=np.int64)
        self.rows = 0

    @property
    def bound(self) -> float:
        return self.scale + math.sqrt(self.width) / 2

    def add(self, rows: np.ndarray, group: np.ndarray) -> None:
        """Round ``rows`` (m, width) to the lattice and add row i into ``total[group[i]]``."""
        x = np.asarray(rows, dtype=np.float64)
        g = np.asarray(group, dtype=np.int64)
        if x.ndim != 2 or x.shape[1] != self.width or g.shape != (len(x),):
            raise ValueError(f"rows must be (m, {self.width}) with one group each, got {x.shape} and {g.shape}")
        if len(x) and (g.min() < 0 or g.max() >= len(self.total)):
            raise ValueError(f"groups must lie in 0..{len(self.total) - 1}")
        norms = np.linalg.norm(x, axis=1)
        if not np.all(np.isfinite(norms)):
            raise ValueError("rows must be finite")
        x /= np.maximum(norms, 1.0)[:, None]  # float rounding may leave a unit row a hair above 1
        q = np.rint(x * self.scale).astype(np.int64)
        for k in np.unique(g):  # integer sums: exact and independent of the order and batching of the rows
            self.total[k] += q[g == k].sum(axis=0)
        self.rows += len(x)


@dataclass(frozen=True)
class ExactRelease:
    """The integer sum plus exact discrete Gaussian noise, and how it was calibrated."""

    noisy_total: np.ndarray  # int64, the shape of FixedPointSum.total
    scale: int  # lattice: the real-valued sum is noisy_total / scale
    noise_multiplier: float  # z = σ_int / (2·bound)
    sigma: float  # σ_int / scale: the noise's standard deviation in the units of the real-valued sum

    def info(self) -> dict:
        return {"noise": "exact discrete Gaussian on a fixed-point integer sum", "accountant": RDP,
                "lattice_scale": self.scale, "noise_multiplier": self.noise_multiplier}  # fmt: skip


def exact_gaussian_release(acc: FixedPointSum, epsilon: float, delta: float, rng: RNG) -> ExactRelease:
    """(ε, δ)-DP release of ``acc.total`` under replace-one of a row: exact discrete Gaussian noise with
    σ_int = z·2·bound, z from :func:`rdp_noise_multiplier`."""
    z = rdp_noise_multiplier(epsilon, delta)
    sigma_int = math.nextafter(z * 2 * acc.bound, math.inf)  # never a hair below the calibrated σ
    noise = discrete_gaussian(rng, sigma_int, acc.total.shape)
    return ExactRelease(acc.total + noise, acc.scale, z, sigma_int / acc.scale)
