"""dp-accounting's privacy-loss distribution of a Gaussian mechanism, the same to the last bit, built in a fraction
of the time.

Every ledger check, calibration and audit curve of privpix composes Gaussian PLDs. dp-accounting 0.6 builds one with
connect-the-dots: δ(ε) on a grid of ε, one point per ``value_discretization_interval`` over the whole loss range
(430,000 points for a Gaussian of σ = 0.5 on the default grid of 1e-4), and for each point the x at which the
privacy loss equals ε, found by a chain of Python method calls, one point at a time: 0.4 s for that PLD, 0.5–0.9 s
for a Poisson-sampled one under replace-one. :func:`gaussian_pld` finds the x of all points at once: the same IEEE
operations on the same values in the same order, as numpy array arithmetic (``+ − × ÷`` are correctly rounded
either way), ``np.logaddexp`` where dp-accounting calls it on one value at a time (the same C loop per element),
and ``math.exp`` / ``math.log1p`` where dp-accounting calls them, one value at a time (numpy's vectorised exp may
round differently). The rest of the construction is dp-accounting's own. So the PLD, and every ε and δ read from
it, is dp-accounting's exactly: ``tests/test_gaussian_pld.py`` compares the probabilities bit for bit, and
``benchmarks/pld_speed.py`` over a wider sweep, with the times.

The grid is computed at once for the two cases privpix builds all the time: no subsampling (any neighbouring
relation), and Poisson subsampling under replace-one (DP-SGD's steps charged to the ledger). A subsampled Gaussian
under add/remove, the privacy-buckets construction (``use_connect_dots=False``), and any dp-accounting release
other than :data:`VERIFIED_DP_ACCOUNTING` (whose private construction helpers this module calls) take
dp-accounting's own path, unchanged.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import numpy as np

from privpix.version import installed_is

# The dp-accounting release whose construction this module reproduces (constraints.txt pins it). Another release
# may change the formulas or the helpers: it gets dp-accounting's own from_gaussian_mechanism.
VERIFIED_DP_ACCOUNTING = "0.6.0"


def _fast_path_available() -> bool:
    return installed_is("dp-accounting", VERIFIED_DP_ACCOUNTING)


@functools.cache
def _loss_class() -> type:
    """dp-accounting's GaussianPrivacyLoss with δ(ε) on a grid computed at once (defined on first use: the
    privacy layer does not import dp-accounting until a composition needs it)."""
    from dp_accounting.pld import privacy_loss_mechanism as plm

    adjacency = plm.AdjacencyType

    class GridGaussianPrivacyLoss(plm.GaussianPrivacyLoss):
        def _inverses(self, eps: np.ndarray) -> np.ndarray | None:
            """The inverse privacy loss at each ε of ``eps`` (what ``inverse_privacy_loss`` returns for each), or
            None where this class leaves the case to dp-accounting."""
            s, sd = self.sensitivity, self._standard_deviation
            if self.sampling_prob == 1.0:
                if self.adjacency_type == adjacency.REPLACE:
                    return np.where(eps == 0, 0.0, -eps * sd**2 / s / 2)
                remove = -0.5 * s - eps * (sd**2) / s
                if self.adjacency_type == adjacency.REMOVE:
                    return remove
                return s + remove  # ADD
            if self.adjacency_type != adjacency.REPLACE:
                return None
            q = self.sampling_prob
            # x = σ²/Δ · (asinh(−sign(ε)·sinh(|ε|/2)·α) − ε/2), with log α and log sinh as dp-accounting takes them.
            log_alpha = 0.5 * (s / sd) ** 2 + math.log1p(-q) - math.log(q)
            out = np.zeros_like(eps)
            nonzero = eps != 0
            e = eps[nonzero]
            half = np.abs(e) / 2
            log1p_term = np.array([math.log1p(-math.exp(-2 * a)) for a in half.tolist()], dtype=float)
            log_sinh = half + log1p_term - math.log(2)
            log_term = 0.0 + (log_alpha + log_sinh)  # log|b| + a with |b| = 1, as dp-accounting's asinh_exp adds it
            asinh = np.logaddexp(0.5 * np.logaddexp(0.0, 2 * log_term), log_term)
            asinh = np.where(e >= 0, -asinh, asinh)
            out[nonzero] = sd**2 / s * (asinh - e / 2)
            return out

        def get_delta_for_epsilon(self, epsilon: Any) -> Any:
            # δ(ε) = μ_upper_cdf(x) − e^ε · μ_lower_cdf(x) at x = inverse(ε), clipped to [0, 1]: dp-accounting's
            # formula, with every x of the grid computed at once (in both cases here, every ε takes the formula).
            scalar = isinstance(epsilon, numbers.Number)
            eps = np.array([epsilon]) if scalar else np.asarray(epsilon)
            x = self._inverses(eps.astype(float, copy=False))
            if x is None:
                return super().get_delta_for_epsilon(epsilon)
            deltas = np.zeros_like(eps, dtype=float)
            deltas[...] = self.mu_upper_cdf(x) - np.exp(eps + self.mu_lower_log_cdf(x))  # [...]: 0-d too
            deltas = np.clip(deltas, 0, 1)
            return float(deltas[0]) if scalar else deltas

    return GridGaussianPrivacyLoss


def gaussian_pld(
    standard_deviation: float,
    *,
    sensitivity: float = 1.0,
    pessimistic_estimate: bool = True,
    value_discretization_interval: float = 1e-4,
    log_mass_truncation_bound: float = -50,
    sampling_prob: float = 1.0,
    use_connect_dots: bool = True,
    neighboring_relation: Any = None,
):
    """``dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism`` with the same arguments (units and
    defaults as there: ``standard_deviation`` in the units of ``sensitivity``; ``neighboring_relation`` None is its
    default, add-or-remove-one), returning the same PrivacyLossDistribution, bit for bit."""
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld import privacy_loss_distribution as pld

    relation = NeighboringRelation.ADD_OR_REMOVE_ONE if neighboring_relation is None else neighboring_relation
    replace = relation == NeighboringRelation.REPLACE_ONE
    # Without subsampling, add-or-remove (and replace-special, the same PLD) is dp-accounting's REMOVE PLD alone.
    unsampled_remove = sampling_prob == 1.0 and relation in (NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                              NeighboringRelation.REPLACE_SPECIAL)  # fmt: skip
    if not (_fast_path_available() and use_connect_dots and (replace or unsampled_remove)):
        return pld.from_gaussian_mechanism(
            standard_deviation, sensitivity=sensitivity, pessimistic_estimate=pessimistic_estimate,
            value_discretization_interval=value_discretization_interval,
            log_mass_truncation_bound=log_mass_truncation_bound, sampling_prob=sampling_prob,
            use_connect_dots=use_connect_dots, neighboring_relation=relation)  # fmt: skip
    from dp_accounting.pld import privacy_loss_mechanism as plm

    loss = _loss_class()(
        standard_deviation, sensitivity=sensitivity, pessimistic_estimate=pessimistic_estimate,
        log_mass_truncation_bound=log_mass_truncation_bound, sampling_prob=sampling_prob,
        adjacency_type=plm.AdjacencyType.REPLACE if replace else plm.AdjacencyType.REMOVE)  # fmt: skip
    pmf = pld._create_pld_pmf_from_monotone_privacy_loss(
        loss, pessimistic_estimate=pessimistic_estimate, value_discretization_interval=value_discretization_interval,
        use_connect_dots=True)  # fmt: skip
    return pld.PrivacyLossDistribution(pmf)


def pld_bits(dist) -> list[tuple]:
    """Everything a PLD's ε and δ are read from, to compare two PLDs bit for bit: per side (remove, add), the lowest
    loss index, the probabilities as bytes, the mass at infinity and the grid (dp-accounting's fields)."""
    out = []
    for pmf in (dist._pmf_remove, dist._pmf_add):
        dense = pmf.to_dense_pmf()
        out.append((dense._lower_loss, dense._probs.tobytes(), dense._infinity_mass, dense._discretization))
    return out
