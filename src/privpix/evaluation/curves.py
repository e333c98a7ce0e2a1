"""Trade-off curves for audits: an ε lower bound from a test's *balanced* error, read through a stated curve.

A mechanism is f-DP when every test of x₀ against x₁ has type II error β ≥ f(α) (Dong, Roth & Su 2022). For a
symmetric convex trade-off function f, α + f(α) is smallest at the fixed point α* = f(α*), so every test of an
f-DP mechanism has (α + β)/2 ≥ α*. The audit counts the errors of one test on both held-out sides, bounds the
mean error rate u ≥ (α + β)/2 from above, and reports the largest ε whose curve's fixed point is still ≤ u: a
mechanism that really is as private as that curve at its true ε has α*(ε_true) ≤ (α + β)/2 ≤ u, so ε_true ≥ the
bound. The curves (each a family indexed by ε, with the claim's δ):

* ``(ε, δ)-DP``: f(α) = max(0, 1 − δ − e^ε·α, e^−ε·(1 − δ − α)), fixed point (1 − δ)/(1 + e^ε). It holds for
  *every* (ε, δ)-DP mechanism, so this bound needs no assumption; randomized response meets the curve exactly.
* ``Laplace``: the trade-off of Laplace(0, 1/ε) against Laplace(1, 1/ε), fixed point e^(−ε/2)/2. It assumes the
  mechanism is at least as private as the one-dimensional Laplace mechanism of its true ε (true of Laplace noise
  with L1 sensitivity: the one-dimensional pair dominates), and only pure claims (δ = 0) are read through it.
* ``Gaussian DP``: μ-GDP, f(α) = Φ(Φ⁻¹(1 − α) − μ), fixed point Φ(−μ/2); μ is turned into the ε at the claim's δ
  by the exact GDP conversion δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2). Every Gaussian mechanism is exactly
  (Δ/σ)-GDP; a claim calibrated by the analytic Gaussian mechanism is the ε of that μ.

The balanced error's upper bound is a Clopper–Pearson bound on the pooled errors of both sides (m trials each):
the count is a sum of 2m independent Bernoulli trials with two rates, and its lower tail is at most the
binomial one with the mean rate (Hoeffding 1956, Theorem 4), so the binomial bound keeps its level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

FAMILY_CURVES = {"laplace": "Laplace", "gaussian": "Gaussian DP", "randomized-response": "(ε, δ)-DP"}


@dataclass(frozen=True)
class Curve:
    """One trade-off family at the claim's δ: ``name``, the assumption a bound through it rests on (empty when
    none), and the map between ε and its balanced error (the fixed point α*)."""

    name: str
    delta: float
    assumption: str

    def balanced_error(self, epsilon: float) -> float:
        """α*(ε): the smallest (α + β)/2 any test can reach against a mechanism on this curve at ``epsilon``."""
        if self.name == "Laplace":
            return 0.5 * math.exp(-epsilon / 2)
        if self.name == "Gaussian DP":
            return float(stats.norm.cdf(-gdp_mu(epsilon, self.delta) / 2))
        return (1.0 - self.delta) / (1.0 + math.exp(epsilon))

    def epsilon(self, u: float) -> float:
        """The largest ε with α*(ε) ≤ ``u`` (0 when even ε = 0 is not excluded): the lower bound for a test whose
        mean error rate is at most ``u``."""
        if not 0 <= u < self.balanced_error(0.0):
            return 0.0
        if u <= 0:
            return math.inf
        if self.name == "Laplace":
            return -2.0 * math.log(2.0 * u)
        if self.name == "Gaussian DP":
            return gdp_epsilon(-2.0 * float(stats.norm.ppf(u)), self.delta)
        return math.log((1.0 - self.delta - u) / u)


def curve_for(noise_family: str | None, delta: float) -> Curve | None:
    """The curve a mechanism's declared noise family is read through at the claim's ``delta``; ``None`` when
    there is none to use (no family; Laplace with δ > 0; Gaussian with δ = 0, where every μ > 0 breaks the claim)."""
    if noise_family == "laplace":
        if delta > 0:
            return None
        return Curve("Laplace", 0.0, "the mechanism is at least as private as the one-dimensional Laplace mechanism "
                     "of its true ε (Laplace noise, L1 sensitivity)")  # fmt: skip
    if noise_family == "gaussian":
        if delta <= 0:
            return None
        return Curve("Gaussian DP", delta, "the mechanism is μ-GDP for the μ of its true ε at this δ (Gaussian "
                     "noise: exactly Δ/σ-GDP)")  # fmt: skip
    if noise_family == "randomized-response":
        return Curve("(ε, δ)-DP", delta, "")
    return None


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP mechanism at ``delta`` (Dong, Roth & Su 2022, Corollary 2.13), by root finding."""
    if mu <= 0:
        return 0.0
    if mu == math.inf:
        return math.inf

    def excess(eps: float) -> float:
        return float(stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)) - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2
        if hi > 1e4:
            return math.inf
    return float(optimize.brentq(excess, 0.0, hi, xtol=1e-10))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The μ whose GDP curve gives exactly (``epsilon``, ``delta``) (inverse of :func:`gdp_epsilon`)."""

    def gap(mu: float) -> float:
        return gdp_epsilon(mu, delta) - epsilon

    if gap(1e-9) >= 0:
        return 0.0
    hi = 1.0
    while gap(hi) < 0:
        hi *= 2
    return float(optimize.brentq(gap, 1e-9, hi, xtol=1e-12))


def pooled_error_upper(errors: int, trials: int, alpha: float) -> float:
    """One-sided Clopper–Pearson upper bound at level 1 − ``alpha`` on the mean error rate of ``errors`` out of
    ``trials`` tests pooled over both sides (valid for the two-rate sum, see the module docstring)."""
    if errors >= trials:
        return 1.0
    return float(stats.beta.ppf(1.0 - alpha, errors + 1, trials - errors))


def reference_samples(family: str, epsilon: float, n: int, rng: np.random.Generator,
                      delta: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """n outputs on x₀ = 0 and n on x₁ = 1 of a scalar mechanism whose ε is known exactly (sensitivity 1): for
    calibrating audits. ``laplace``: x + Laplace(1/ε), pure ε-DP. ``gaussian``: x + N(0, z²), z from the analytic
    Gaussian mechanism at (ε, ``delta``). ``randomized-response``: binary randomized response keeping x with
    probability e^ε / (1 + e^ε)."""
    if family == "laplace":
        return rng.laplace(0.0, 1.0 / epsilon, n), 1.0 + rng.laplace(0.0, 1.0 / epsilon, n)
    if family == "gaussian":
        from privpix.gaussian_release import analytic_noise_multiplier

        z = analytic_noise_multiplier(epsilon, delta)
        return rng.normal(0.0, z, n), 1.0 + rng.normal(0.0, z, n)
    if family == "randomized-response":
        keep = math.exp(epsilon) / (1.0 + math.exp(epsilon))
        return (rng.random(n) >= keep).astype(np.float64), (rng.random(n) < keep).astype(np.float64)
    raise ValueError(f"unknown family {family!r}")
