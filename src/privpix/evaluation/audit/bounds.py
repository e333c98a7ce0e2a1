"""The bounds an audit reports from two samples of a test statistic: Clopper–Pearson error bounds, the raw ε lower
bound, the trade-off-curve bound, and the statistics and thresholds chosen on the selection trials."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from privpix.errors import ParameterError
from privpix.evaluation.audit.curves import AnyCurve, curve_for, pooled_error_upper
from privpix.evaluation.audit.result import CONFIDENCE, CURVE_SELECT_SHARE, SELECT_SHARE, split_trials

# --------------------------------------------------------------------------------------------- bounds


def _cp_upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bounds at level 1 − alpha for proportions k / n (k an array)."""
    if n <= 0:
        raise ParameterError(f"n must be positive, got {n}")
    k = np.asarray(k)
    out = np.ones(k.shape)
    ok = k < n
    out[ok] = stats.beta.ppf(1.0 - alpha, k[ok] + 1, n - k[ok])
    return out


def _epsilon_bounds(fp, fn, n0: int, n1: int, delta: float, alpha: float) -> np.ndarray:
    """Vectorised :func:`epsilon_lower_bound` over arrays of error counts."""
    num = 1.0 - delta - _cp_upper(fn, n1, alpha)
    den = _cp_upper(fp, n0, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where((num > 0) & (den > 0), np.log(np.maximum(num, 1e-300) / den), 0.0)
    return np.maximum(eps, 0.0)


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper confidence bound at level 1 − alpha for a binomial proportion k / n."""
    return float(_cp_upper(np.array([k]), n, alpha)[0])


def epsilon_lower_bound(fp: int, fn: int, n0: int, n1: int, delta: float = 0.0, alpha: float = 0.025) -> float:
    """ε lower bound ln((1 − δ − β̄) / ᾱ) from a test's false positives ``fp`` of ``n0`` and false negatives
    ``fn`` of ``n1``, with ᾱ, β̄ their Clopper–Pearson upper bounds at 1 − ``alpha`` each. 0 when the test
    shows nothing."""
    return float(_epsilon_bounds(np.array([fp]), np.array([fn]), n0, n1, delta, alpha)[0])


def max_auditable_epsilon(n: int, delta: float = 0.0, alpha: float = 0.025) -> float:
    """The largest bound ``n`` held-out trials per side can show (a perfect test)."""
    return epsilon_lower_bound(0, 0, n, n, delta, alpha)


def fit_statistics(x0: np.ndarray, x1: np.ndarray) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Scalar statistics fitted on training outputs x0, x1: a projection on the mean difference, the single
    most separated coordinate, and the two-sided (distance from x₀'s median) form of each."""
    mu0, mu1 = x0.mean(axis=0), x1.mean(axis=0)
    diff = (mu1 - mu0).astype(np.float64)
    spread = np.sqrt(0.5 * (x0.var(axis=0) + x1.var(axis=0))) + 1e-9
    j = int(np.argmax(np.abs(diff) / spread))
    proj = (lambda z: z.astype(np.float64) @ diff) if np.any(diff) else (lambda z: z.astype(np.float64).sum(1))
    coord = lambda z: z[:, j].astype(np.float64)  # noqa: E731
    med_p, med_c = float(np.median(proj(x0))), float(np.median(coord(x0)))
    out = {
        "projection on mean difference": proj,
        f"released value {j}": coord,
        "|projection − median under x₀|": lambda z: np.abs(proj(z) - med_p),
        f"|released value {j} − median under x₀|": lambda z: np.abs(coord(z) - med_c),
    }
    out.update(_categorical_statistic(x0, x1))
    return out


# Outputs with at most this many distinct values (randomized-response reports, quantised levels) also get a
# likelihood-ratio statistic per value; a mean shift is a poor summary of a categorical coordinate.
MAX_CATEGORIES = 64
MIN_SUPPORT = 10


def _categorical_statistic(x0: np.ndarray, x1: np.ndarray) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """For categorical outputs: the coordinate whose value distributions differ most (total variation on these
    training outputs) and, as the statistic, the log ratio of its value's frequencies under x₁ and x₀ (add-½
    smoothing; 0 for values seen fewer than ``MIN_SUPPORT`` times): the most powerful test of one coordinate.
    Empty when the outputs take more than ``MAX_CATEGORIES`` values."""
    if len(np.unique(x0[:50])) > MAX_CATEGORIES:  # cheap refusal of continuous outputs
        return {}
    values = np.unique(np.concatenate([x0.ravel(), x1.ravel()]))
    if len(values) > MAX_CATEGORIES:
        return {}
    v, k = len(values), x0.shape[1]

    def counts(x: np.ndarray) -> np.ndarray:  # (v, k): how often each value occurs in each coordinate
        codes = np.searchsorted(values, x) * k + np.arange(k)
        return np.bincount(codes.ravel(), minlength=v * k).reshape(v, k).astype(np.float64)

    c0, c1 = counts(x0), counts(x1)
    p0, p1 = (c0 + 0.5) / (len(x0) + 0.5 * v), (c1 + 0.5) / (len(x1) + 0.5 * v)
    j = int(np.argmax(0.5 * np.abs(c1 / len(x1) - c0 / len(x0)).sum(axis=0)))
    # A value seen a few times only (on either side) gets no weight: a ratio from one or two draws would let the
    # test take in rare values, which then cost false positives on the held-out trials.
    table = np.where(c0[:, j] + c1[:, j] >= MIN_SUPPORT, np.log(p1[:, j]) - np.log(p0[:, j]), 0.0)

    def llr(z: np.ndarray) -> np.ndarray:
        return table[np.clip(np.searchsorted(values, z[:, j]), 0, v - 1)]

    return {f"likelihood ratio of released value {j} (categorical)": llr}


def _best_threshold(s0: np.ndarray, s1: np.ndarray, delta: float, alpha: float = 0.025) -> tuple[float, float, int]:
    """(bound, threshold, sign) maximising the Clopper–Pearson ε bound on these samples; the test says x₁
    when sign · s > sign · threshold."""
    pooled = np.unique(np.concatenate([s0, s1]))
    if len(pooled) > 400:
        pooled = np.unique(np.quantile(pooled, np.linspace(0, 1, 400)))
    cands = np.concatenate([pooled, [pooled[0] - 1.0]])
    best = (0.0, 0.0, 1)
    for sign in (1, -1):
        a, b = np.sort(sign * s0), np.sort(sign * s1)
        t = sign * cands
        fp = len(a) - np.searchsorted(a, t, side="right")
        fn = np.searchsorted(b, t, side="right")
        eps = _epsilon_bounds(fp, fn, len(a), len(b), delta, alpha)
        i = int(np.argmax(eps))
        if eps[i] > best[0]:
            best = (float(eps[i]), float(cands[i]), sign)  # the threshold on s itself, not on sign · s
    return best


@dataclass
class Candidate:
    """One (pair, statistic): its scalar value in every trial on each side; the first ``select`` trials chose
    the statistic and choose the test, the rest measure it. ``curve``: a candidate for the balanced (curve) test,
    else for the raw one."""

    pair_label: str
    statistic: str
    s0: np.ndarray
    s1: np.ndarray
    select: int
    curve: bool = False


def ceiling(held_raw: int, held_curve: int, claim_delta: float, curve: AnyCurve | None, confidence: float) -> float:
    """The largest bound a test without a held-out error can show: the raw test measured on ``held_raw`` trials
    per side, the curve test (when there is a curve) on ``held_curve``, at the levels :func:`bounds` uses."""
    gamma = 1.0 - confidence
    g_raw = gamma / 2 if curve is not None else gamma
    top = max_auditable_epsilon(held_raw, claim_delta, g_raw / 2)
    if curve is not None:
        top = max(top, curve.epsilon(pooled_error_upper(0, 2 * held_curve, gamma / 2)))
    return top


def _errors(s0: np.ndarray, s1: np.ndarray, thr: float, sign: int) -> tuple[int, int]:
    """(false positives on x₀'s values, false negatives on x₁'s) of the test "x₁ when sign·s > sign·thr"."""
    return int(np.sum(sign * s0 > sign * thr)), int(np.sum(sign * s1 <= sign * thr))


def _balanced_threshold(s0: np.ndarray, s1: np.ndarray) -> tuple[int, float, int]:
    """(errors, threshold, sign) of the test with the fewest errors on both sides together. For the shift
    families the curves describe, the best such test cuts halfway between the two medians; that cut is tried
    first (robust when errors are rare), then every quantile of the pooled values."""
    m0, m1 = float(np.median(s0)), float(np.median(s1))
    sign = 1 if m1 >= m0 else -1
    mid = 0.5 * (m0 + m1)
    best = (sum(_errors(s0, s1, mid, sign)), mid, sign)
    pooled = np.unique(np.concatenate([s0, s1]))
    if len(pooled) > 400:
        pooled = np.unique(np.quantile(pooled, np.linspace(0, 1, 400)))
    for sg in (1, -1):
        a, b = np.sort(sg * s0), np.sort(sg * s1)
        t = sg * pooled
        errs = (len(a) - np.searchsorted(a, t, side="right")) + np.searchsorted(b, t, side="right")
        i = int(np.argmin(errs))
        if errs[i] < best[0]:
            best = (int(errs[i]), float(pooled[i]), sg)
    return best


@dataclass
class Bounds:
    """What the held-out trials show (see :class:`AuditResult` for the fields of the same names)."""

    raw_epsilon_lower: float
    curve_epsilon_lower: float
    max_auditable_epsilon: float
    raw_test: Candidate
    false_positives: int
    false_negatives: int
    held_out: int
    curve_test: Candidate | None
    curve_errors: int

    @property
    def epsilon_lower(self) -> float:
        """The larger of the two bounds (the raw one when there is no curve)."""
        c = self.curve_epsilon_lower
        return self.raw_epsilon_lower if math.isnan(c) else max(self.raw_epsilon_lower, c)


def bounds(candidates: list[Candidate], claim_delta: float, curve: AnyCurve | None,
           confidence: float = CONFIDENCE) -> Bounds:  # fmt: skip
    """Choose each test on its candidates' selection trials and measure it on the rest: the raw Clopper–Pearson
    bound (candidates with ``curve`` false) and, with a ``curve``, the balanced-error bound through it (those with
    ``curve`` true), each at half the permitted error when both are used, so both hold together at
    ``confidence``."""
    gamma = 1.0 - confidence
    g_raw = gamma / 2 if curve is not None else gamma
    # Raw: the test with the best Clopper–Pearson bound on the selection trials (each rate at g_raw / 2).
    (_, thr, sign), rc = max(
        ((_best_threshold(c.s0[: c.select], c.s1[: c.select], claim_delta, g_raw / 2), c)
         for c in candidates if not c.curve),
        key=lambda t: t[0][0],
    )  # fmt: skip
    h0, h1 = rc.s0[rc.select :], rc.s1[rc.select :]
    fp, fn_ = _errors(h0, h1, thr, sign)
    raw = epsilon_lower_bound(fp, fn_, len(h0), len(h1), claim_delta, g_raw / 2)
    curve_eps, cc, k = float("nan"), None, 0
    if curve is not None:
        # Curve: the test with the fewest selection errors on both sides together.
        (_, cthr, csign), cc = min(
            ((_balanced_threshold(c.s0[: c.select], c.s1[: c.select]), c) for c in candidates if c.curve),
            key=lambda t: t[0][0],
        )
        c0, c1 = cc.s0[cc.select :], cc.s1[cc.select :]
        if len(c0) != len(c1):
            raise ParameterError("the curve bound pools both sides' errors: they need as many trials each")
        k = sum(_errors(c0, c1, cthr, csign))
        n_pooled = len(c0) + len(c1)
        curve_eps = curve.epsilon(pooled_error_upper(k, n_pooled, gamma / 2))
    top = ceiling(len(h0), 0 if cc is None else len(cc.s0) - cc.select, claim_delta, curve, confidence)
    return Bounds(raw, curve_eps, top, rc, fp, fn_, len(h0), cc, k)


def bounds_from_samples(s0: np.ndarray, s1: np.ndarray, claim_delta: float = 0.0, noise_family: str | None = None,
                        confidence: float = CONFIDENCE, curve: AnyCurve | None = None) -> Bounds:  # fmt: skip
    """The audit's bounds for one scalar statistic observed in n trials on each side (``s0`` under x₀, ``s1``
    under x₁), read through ``curve``, else the curve of ``noise_family`` at ``claim_delta`` when it has one, with
    the audit's split of selection and held-out trials. What the calibration tests, white-box audits and
    ``benchmarks/audit_power.py`` run."""
    s0, s1 = np.asarray(s0, dtype=np.float64), np.asarray(s1, dtype=np.float64)
    if s0.shape != s1.shape or s0.ndim != 1 or len(s0) < 20:
        raise ParameterError("s0 and s1 must be 1-D arrays of the same length >= 20")
    if curve is None:
        curve = curve_for(noise_family, claim_delta)
    cands = [Candidate("samples", "the value", s0, s1, split_trials(len(s0), SELECT_SHARE))]
    if curve is not None:
        cands.append(Candidate("samples", "the value", s0, s1, split_trials(len(s0), CURVE_SELECT_SHARE), True))
    return bounds(cands, claim_delta, curve, confidence)
