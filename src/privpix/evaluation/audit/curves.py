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

* ``composition`` (:class:`ComposedCurve`): for a mechanism whose noise is several releases: one-dimensional
  Laplace pairs, Gaussian pairs (μ), Poisson-subsampled Gaussian steps composed T times.

Which curve a mechanism's audit reads follows from the noise its claim says earns one unit of its neighbours
(:attr:`privpix.mechanisms.Claim.unit_events`, :func:`curve_of`): Laplace releases only, the Laplace curve; Gaussian
releases only, Gaussian DP; bare ε or (ε, δ) (randomized response), the (ε, δ)-DP curve; any other mix, or a
sampled Gaussian, their composition. The family scales every part at once (Laplace ε·s, μ·s, noise
  multiplier z/s) and is indexed by the composition's ε at the claim's δ. For any pair, min over tests of
  (α + β)/2 = (1 − TV)/2 and TV is the privacy profile at 0, δ(0); both numbers come from dp-accounting's privacy
  loss distributions (Google's PLD library), TV from its pessimistic estimate (an upper bound, so the α* used is
  never above the true one) and the ε index from its optimistic one (a lower bound): the bound stays a lower bound.

The balanced error's upper bound is a Clopper–Pearson bound on the pooled errors of both sides (m trials each):
the count is a sum of 2m independent Bernoulli trials with two rates, and its lower tail is at most the
binomial one with the mean rate (Hoeffding 1956, Theorem 4), so the binomial bound keeps its level.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

from privpix.privacy.composition import (
    ApproxDP,
    GaussianNoise,
    LaplaceNoise,
    NoiseEvent,
    PureDP,
    SampledGaussianNoise,
)

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


# dp-accounting's grid for the PLDs of composed curves: fine enough that the discretisation moves ε by < 1e-3 at
# the sizes audited, coarse enough that one curve evaluation takes milliseconds (Laplace + Gaussian) to ~0.1 s
# (a few hundred subsampled Gaussian steps).
PLD_INTERVAL = 1e-3
OPTIMISTIC_SLACK = 0.02
PART_KINDS = ("laplace", "gaussian", "sampled-gaussian")
SAMPLED_RELATIONS = ("add-remove", "replace-one")
# Composed curves are followed up to this ε: beyond it a PLD's support (and memory) grows without bound (losses
# of order 1/σ² per step), and no claim audited needs more; a bound that reaches it is reported as EPSILON_CAP.
EPSILON_CAP = 40.0


@dataclass(frozen=True)
class ComposedCurve:
    """The trade-off of an adaptive composition of simple noisy releases, scaled as one family (module docstring).

    ``parts``: tuples ``("laplace", ε)`` (the 1-D pair Laplace(0, 1/ε) against Laplace(1, 1/ε)), ``("gaussian",
    μ)`` (N(0, 1) against N(μ, 1)) and ``("sampled-gaussian", z, q, T)`` (T steps of the Gaussian mechanism with
    noise multiplier z on a Poisson sample of rate q, add/remove neighbours: DP-SGD's steps; with a fifth element
    ``"replace-one"``, the record replaced by one whose clipped contribution points the other way, dp-accounting's
    REPLACE_ONE), each at the mechanism's real noise (scale s = 1)."""

    parts: tuple[tuple[Any, ...], ...]
    delta: float
    assumption: str

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a composed curve needs at least one part")
        for part in self.parts:
            if part[0] not in PART_KINDS:
                raise ValueError(f"unknown part {part!r}; kinds are {PART_KINDS}")
            if part[0] == "sampled-gaussian" and len(part) == 5 and part[4] not in SAMPLED_RELATIONS:
                raise ValueError(f"unknown relation in {part!r}; relations are {SAMPLED_RELATIONS}")
        if not 0 < self.delta < 1:
            raise ValueError(f"a composed curve is read at a δ in (0, 1), got {self.delta}")

    @property
    def name(self) -> str:
        words = {
            "laplace": "Laplace ε={}",
            "gaussian": "Gaussian μ={}",
            "sampled-gaussian": "{2}× sampled Gaussian z={0}, q={1}",
        }
        described = [
            words[p[0]].format(*(f"{v:.4g}" if isinstance(v, float) else v for v in p[1:4]))
            + (f" ({p[4]})" if len(p) == 5 else "")
            for p in self.parts
        ]
        return "composition (PLD): " + " ⊗ ".join(described)

    def _pld(self, scale: float, pessimistic: bool, fine: bool = True):
        return _pld(self.parts, scale, pessimistic, fine)

    def _alpha(self, scale: float) -> float:
        """α* at ``scale``: (1 − TV)/2, TV from the pessimistic PLD (so never above the true α*)."""
        if scale <= 0:
            return 0.5
        return _cached(
            self, "alpha", scale, lambda: 0.5 * (1.0 - min(1.0, self._pld(scale, True).get_delta_for_epsilon(0.0)))
        )

    def _epsilon_upper(self, scale: float) -> float:
        """ε at the claim's δ at ``scale`` from the pessimistic PLD (never below the true ε): where to stop."""
        return _cached(self, "eps-upper", scale,
                       lambda: max(0.0, float(self._pld(scale, True).get_epsilon_for_delta(self.delta))))  # fmt: skip

    def _epsilon_at(self, scale: float, fine: bool = True) -> float:
        """ε at the claim's δ at ``scale``, from the optimistic PLD (never above the true ε); ``fine``: on the grid
        refined with the number of releases (see :func:`_pld`)."""
        if scale <= 0:
            return 0.0
        pld = lambda: self._pld(scale, False, fine)  # noqa: E731
        return _cached(self, f"eps-{fine}", scale, lambda: max(0.0, float(pld().get_epsilon_for_delta(self.delta))))

    def _bracket(self, fn, target: float, increasing: bool) -> tuple[float, float]:
        """(lo, hi) with hi / lo ≤ 1.001 around the scale where the monotone ``fn`` crosses ``target``: ``fn(hi)``
        is past it (≥ target when ``increasing``, ≤ when not), ``fn(lo)`` is not; lo = 0 or hi = inf when the
        crossing lies below 1e-6 or where ε passes ``EPSILON_CAP``. Bisection on the log scale."""
        lo, hi = 1.0, 1.0
        past = (lambda v: v >= target) if increasing else (lambda v: v <= target)
        while not past(fn(hi)):
            if self._epsilon_upper(hi) >= EPSILON_CAP:
                return hi, math.inf  # the crossing is beyond the ε any audit reports
            lo, hi = hi, 2.0 * hi
        while past(fn(lo)):
            lo, hi = 0.5 * lo, lo
            if lo < 1e-6:
                return 0.0, hi
        while hi / lo > 1.001:
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if past(fn(mid)) else (mid, hi)
        return lo, hi

    def balanced_error(self, epsilon: float) -> float:
        """α* of the family member whose ε (at the claim's δ) is ``epsilon`` (to 0.1 % in scale, rounded to the
        larger α*)."""
        if epsilon <= 0:
            return 0.5
        lo, _ = self._bracket(self._epsilon_at, epsilon, increasing=True)
        return self._alpha(lo)

    def epsilon(self, u: float) -> float:
        """The ε (at the claim's δ) of the least private member whose α* is still ≥ ``u``: a lower bound for a
        test whose mean error rate is at most ``u``; at most ``EPSILON_CAP``."""
        if not 0 <= u < 0.5:
            return 0.0
        if u <= 0:
            return math.inf
        # The largest scale with α*(s) ≥ u: a mechanism at its true scale s_true has α*(s_true) ≤ u, so s_true is
        # at least the scale where α* first drops to u.
        # Rounded down: the bracket's lower end still has α* > u.
        lo, hi = self._bracket(self._alpha, u, increasing=False)
        if hi == math.inf:
            # α* > u still at lo, where the pessimistic ε passed the cap: the true ε there is only known to be at
            # least the optimistic one (on the coarse grid, which is cheap at this scale and still a lower bound).
            return min(EPSILON_CAP, self._epsilon_at(lo, fine=False))
        return min(EPSILON_CAP, self._epsilon_at(lo))


@functools.lru_cache(maxsize=8)
def _pld(parts: tuple[tuple[Any, ...], ...], scale: float, pessimistic: bool, fine: bool):
    """dp-accounting's PLD of the composition at ``scale`` (cached: a bisection asks α* and ε of one scale)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    from privpix.privacy.gaussian_pld import gaussian_pld

    # Connect-the-dots only gives pessimistic estimates; the optimistic one is dp-accounting's privacy buckets,
    # whose rounding of each release's loss adds up over the releases composed: its grid is refined so that
    # the sum stays near OPTIMISTIC_SLACK (without it, 4,680 DP-SGD steps read an ε of 0.92 as 0), down to a
    # grid of 1e-5 (finer ones cost seconds and memory per PLD; 4,680 steps then read 0.92 as 0.88).
    releases = sum(int(p[3]) if p[0] == "sampled-gaussian" else 1 for p in parts)
    interval = PLD_INTERVAL if pessimistic or not fine else min(PLD_INTERVAL, max(1e-5, OPTIMISTIC_SLACK / releases))
    opts: dict[str, Any] = {"pessimistic_estimate": pessimistic, "value_discretization_interval": interval,
            "use_connect_dots": pessimistic}  # fmt: skip
    out = None
    for part in parts:
        if part[0] == "laplace":
            one = pld.from_laplace_mechanism(1.0 / (part[1] * scale), **opts)
        elif part[0] == "gaussian":
            one = gaussian_pld(1.0 / (part[1] * scale), **opts)
        else:
            z, q, steps = part[1:4]
            relation = {}
            if len(part) == 5 and part[4] == "replace-one":
                from dp_accounting import NeighboringRelation

                relation = {"neighboring_relation": NeighboringRelation.REPLACE_ONE}
            one = gaussian_pld(z / scale, sampling_prob=q, **opts, **relation).self_compose(int(steps))
        out = one if out is None else out.compose(one)
    return out


_CACHE: dict[tuple[Any, ...], float] = {}


def _cached(curve: ComposedCurve, what: str, scale: float, compute) -> float:
    key = (curve.parts, curve.delta, what, round(scale, 12))
    if key not in _CACHE:
        if len(_CACHE) > 20_000:
            _CACHE.clear()
        _CACHE[key] = float(compute())
    return _CACHE[key]


# What an audit reads a bound through: a closed-form family or a declared composition.
AnyCurve = Curve | ComposedCurve


def composed_curve(parts, delta: float) -> ComposedCurve | None:
    """The curve of a declared composition (see :class:`ComposedCurve`), or ``None`` without parts or δ."""
    if not parts or not 0 < delta < 1:
        return None
    why = {
        "laplace": "a Laplace release of L1 sensitivity is dominated by the one-dimensional Laplace pair",
        "gaussian": "a Gaussian release is exactly Δ/σ-GDP",
        "sampled-gaussian": "each step is the Gaussian mechanism on a Poisson sample (add/remove, or replace-one where "
        "stated), every step seen",
    }
    kinds = [k for k in PART_KINDS if any(p[0] == k for p in parts)]  # unknown kinds: refused by ComposedCurve
    return ComposedCurve(
        tuple(tuple(p) for p in parts),
        delta,
        "the mechanism is at least as private as the member of this family (every part's noise scaled alike) whose "
        "ε at this δ is its true ε (" + "; ".join(why[k] for k in kinds) + ")",
    )


def curve_of(events: tuple[NoiseEvent, ...], delta: float, removes: bool = False) -> AnyCurve | None:
    """The curve an audit reads a mechanism through, from the noise that earns one unit of its neighbours
    (``removes``: the audit's neighbours differ by an addition or removal, not a replacement), at the claim's
    ``delta``: a closed form for one Laplace release (Laplace), Gaussian releases only (Gaussian DP: they
    compose to one) or bare ε or (ε, δ) only (the curve every such mechanism is on), else the composition of
    the releases; ``None`` without events, or for a mix no curve describes (bare ε or (ε, δ) beside noise)."""
    if not events:
        return None
    if all(isinstance(e, LaplaceNoise) for e in events) and len(events) == 1 and events[0].count == 1:
        return curve_for("laplace", delta)
    if all(isinstance(e, GaussianNoise) for e in events):
        return curve_for("gaussian", delta)
    if all(isinstance(e, PureDP | ApproxDP) for e in events):
        return curve_for("randomized-response", delta)
    parts: list[tuple[Any, ...]] = []
    for e in events:
        # An event stated for add/remove, audited for a replacement, shifts by twice its sensitivity.
        sens = 2.0 if e.relation == "add-remove" and not removes else 1.0
        if isinstance(e, LaplaceNoise):
            parts += [("laplace", sens * e.epsilon)] * e.count
        elif isinstance(e, GaussianNoise):
            # k Gaussian pairs of μ compose exactly to one of √k·μ; one keeps μ = Δ/σ's very bits.
            parts.append(("gaussian", sens / e.noise_multiplier if e.count == 1 else sens * math.sqrt(e.count)
                          / e.noise_multiplier))  # fmt: skip
        elif isinstance(e, SampledGaussianNoise):
            part = ("sampled-gaussian", e.noise_multiplier, e.sample_rate, e.steps)
            parts.append(part if removes else (*part, "replace-one"))
        else:
            return None
    return composed_curve(tuple(parts), delta)


def curve_for(noise_family: str | None, delta: float) -> Curve | None:
    """The closed-form curve of a noise family (:func:`curve_of` picks it from a claim's noise; calibrations name
    it) at the claim's ``delta``; ``None`` when there is none to use (no family; Laplace with δ > 0; Gaussian
    with δ = 0, where every μ > 0 breaks the claim)."""
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
        from privpix.privacy.gaussian_release import analytic_noise_multiplier

        z = analytic_noise_multiplier(epsilon, delta)
        return rng.normal(0.0, z, n), 1.0 + rng.normal(0.0, z, n)
    if family == "randomized-response":
        keep = math.exp(epsilon) / (1.0 + math.exp(epsilon))
        return (rng.random(n) >= keep).astype(np.float64), (rng.random(n) < keep).astype(np.float64)
    raise ValueError(f"unknown family {family!r}")


def composed_samples(parts, n: int, rng: np.random.Generator, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """n values of the log-likelihood-ratio statistic on x₀ and n on x₁ of a composition of ``("laplace", ε)``
    and ``("gaussian", μ)`` parts (as :class:`ComposedCurve` reads them) with every part scaled by ``scale``: each
    part releases x + noise, and the statistic sums the parts' exact privacy losses, the most powerful test. For
    calibrating composed curves (``scale`` > 1: a mechanism less private than the curve it declares)."""
    s0, s1 = np.zeros(n), np.zeros(n)
    for part in parts:
        kind, value = part[0], float(part[1]) * scale
        if kind == "laplace":
            a0, a1 = rng.laplace(0.0, 1.0 / value, n), 1.0 + rng.laplace(0.0, 1.0 / value, n)
            s0 += value * np.clip(2 * a0 - 1, -1, 1)
            s1 += value * np.clip(2 * a1 - 1, -1, 1)
        elif kind == "gaussian":
            s0 += value * rng.normal(0.0, 1.0, n)
            s1 += value * (value + rng.normal(0.0, 1.0, n))
        else:
            raise ValueError(f"composed_samples draws laplace and gaussian parts, not {kind!r}")
    return s0, s1
