"""Empirical ε audit: a lower bound on the ε a mechanism really spends, measured by distinguishing neighbours.

For a pair of neighbouring inputs (x₀, x₁) (built by the relation the mechanism's
:meth:`~privpix.mechanisms.Mechanism.neighbours` declares, :mod:`privpix.neighbours`) the mechanism is run
``trials`` times on each. A test T (a statistic of the output and a threshold) that says "x₁" with
false-positive rate α on x₀'s outputs and false-negative rate β on x₁'s outputs must, for any (ε, δ)-DP
mechanism, satisfy 1 − β ≤ e^ε α + δ, so

    ε ≥ ln((1 − δ − β) / α).

The pair, the statistic, the threshold and the test's direction are chosen on the first half of the
trials; α and β are then counted on the second half, and replaced by their one-sided Clopper–Pearson upper
bounds (each at 97.5 %, so the bound holds with 95 % confidence jointly). The result is a *lower* bound:
a mechanism whose bound exceeds its claim violates the claim (with 95 % confidence); one whose bound is at
or below it is consistent, which is evidence, not proof. With ``n`` held-out trials per side no bound above
about ln(n / 3.7) can be shown (``max_auditable_epsilon``): a larger claim cannot be refuted by this audit.

Neighbour pairs are worst cases where the unit allows: an all-black image against one with a white column,
pixel block or whole image (data-derived noise scales vanish on a black image), and the dataset's most
typical image against its least typical one; for a claim per encoded feature, two images whose encodings
differ in one value. Releases are compared through ``Release.values()``: pixels, or the report values of a
mechanism that releases features. For mechanisms whose output depends on the whole batch
(``dataset`` unit) the pair is two datasets that differ in one image: ``batch`` copies of one image (a
degenerate, zero-range batch) and a real batch, each against the same with one image replaced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import Mechanism
from privpix.neighbours import NeighbourPair
from privpix.noise import make_rng

CONFIDENCE = 0.95
TARGETS = ("auto", "statistic", "output")
# Synthetic images drawn per trial when a refitted synthesizer's output is audited.
SYNTHETIC_PER_TRIAL = 16
VERDICTS = ("consistent", "violated", "no-claim", "not-audited")
# Why a mechanism whose Capabilities.output is "model" gets no bound: its release is a model fitted once on the
# training set, and this audit compares releases of neighbouring images (no retraining per trial).
NOT_AUDITED_MODEL = "not audited: model output (the audit compares released images or reports, not models)"


@dataclass
class AuditResult:
    """Outcome of :func:`audit`; ``to_dict`` is the JSON of ``privpix audit --json``.

    ``refutable`` is false when the claimed ε is at or above ``max_auditable_epsilon``: then "consistent"
    carries no information. ``perfect_distinguisher`` is true when the held-out test made no error at all:
    on that pair the outputs do not overlap, so no finite ε holds (the bound is capped only by the trials).
    """

    method: str
    parameters: dict[str, Any]
    claimed_epsilon: float | None
    claimed_delta: float
    sound: bool
    unit: str
    audited_epsilon_lower: float
    max_auditable_epsilon: float
    trials: int
    verdict: str
    pair: str
    statistic: str
    false_positive_rate: float
    false_negative_rate: float
    refutable: bool = True
    perfect_distinguisher: bool = False
    confidence: float = CONFIDENCE
    seconds: float = 0.0
    pairs_tried: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


# -------------------------------------------------------------------------------------- neighbours


def neighbour_pairs(mech: Mechanism, images: ImageSet) -> list[NeighbourPair]:
    """Candidate worst-case neighbour pairs for the relation ``mech`` declares, built from ``images``."""
    return mech.neighbours().pairs(images)


# ------------------------------------------------------------------------------------------ trials


def _outputs(mech: Mechanism, pair_side: ImageSet, index: int, trials: int, rng, dataset_level: bool) -> np.ndarray:
    """(trials, k) float32: what was released for the image (pixels, or a feature release's report values,
    through ``Release.values()``; per-image units, all trials in one vectorised call) or, for a dataset pair,
    the release of the differing image and of one unchanged image of each trial."""
    if not dataset_level:
        reps = pair_side.subset(np.zeros(trials, dtype=int))
        return mech.release(reps, rng).values()
    rows = []
    for _ in range(trials):
        rel = mech.release(pair_side, rng).values()
        rows.append(np.concatenate([rel[index], rel[0]]))
    return np.stack(rows).astype(np.float32)


def _statistics(x0: np.ndarray, x1: np.ndarray) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Scalar statistics fitted on training outputs x0, x1: a projection on the mean difference, the single
    most separated coordinate, and the two-sided (distance from x₀'s median) form of each."""
    mu0, mu1 = x0.mean(axis=0), x1.mean(axis=0)
    diff = (mu1 - mu0).astype(np.float64)
    spread = np.sqrt(0.5 * (x0.var(axis=0) + x1.var(axis=0))) + 1e-9
    j = int(np.argmax(np.abs(diff) / spread))
    proj = (lambda z: z.astype(np.float64) @ diff) if np.any(diff) else (lambda z: z.astype(np.float64).sum(1))
    coord = lambda z: z[:, j].astype(np.float64)  # noqa: E731
    med_p, med_c = float(np.median(proj(x0))), float(np.median(coord(x0)))
    return {
        "projection on mean difference": proj,
        f"released value {j}": coord,
        "|projection − median under x₀|": lambda z: np.abs(proj(z) - med_p),
        f"|released value {j} − median under x₀|": lambda z: np.abs(coord(z) - med_c),
    }


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


def audit(
    mech: Mechanism,
    images: ImageSet,
    trials: int = 2000,
    seed: int = 0,
    pairs: list[NeighbourPair] | None = None,
    progress: Callable[[str], None] | None = None,
    target: str = "auto",
) -> AuditResult:
    """Audit ``mech`` on neighbour pairs built from ``images`` (see :func:`neighbour_pairs`).

    A mechanism that fits on the private set under a dataset-level relation (a DP synthesizer) is refitted on
    each side of a pair in every trial: ``target="statistic"`` compares the one DP release its fit makes
    (:meth:`~privpix.mechanisms.Mechanism.released_statistic`, e.g. the noisy embedding: the strongest test, as
    everything after it is post-processing), ``"output"`` the images it then synthesizes (a whole fit per trial,
    so use few trials), ``"auto"`` the statistic when the mechanism has one.

    ``trials`` releases per side of every pair (half choose the test, half measure it). Returns the lower
    bound with 95 % confidence, the claim it is compared to (``mech.audit_claim``) and the verdict:
    ``violated`` when the bound exceeds the claimed ε, ``consistent`` otherwise, ``no-claim`` when the
    mechanism states no ε, ``not-audited`` (NaN bounds, no trials, ``statistic`` saying why) for a mechanism whose
    output is a model.
    """
    if trials < 20:
        raise ParameterError(f"trials must be >= 20, got {trials}")
    if not isinstance(images, ImageSet):
        raise ParameterError("audit: images must be an ImageSet")
    if mech.capabilities().output == "model":
        return _not_audited(mech, images, NOT_AUDITED_MODEL)
    if target not in TARGETS:
        raise ParameterError(f"target must be one of {TARGETS}, got {target!r}")
    t_start = time.perf_counter()
    rng = make_rng(seed)
    relation = mech.neighbours()
    pairs = pairs if pairs is not None else relation.pairs(images)
    if mech.capabilities().fits_on == "private" and relation.dataset_level:
        return _audit_refitted(mech, images, trials, seed, pairs, target, progress)
    claim_delta = mech.audit_claim(images.shape)[1]
    half = trials // 2
    chosen: tuple[float, NeighbourPair, str, float, int, tuple] | None = None
    for pair in pairs:
        x0 = _outputs(mech, pair.a, pair.index, trials, rng, relation.dataset_level)
        x1 = _outputs(mech, pair.b, pair.index, trials, rng, relation.dataset_level)
        tr0, te0, tr1, te1 = x0[:half], x0[half:], x1[:half], x1[half:]
        for sname, fn in _statistics(tr0, tr1).items():
            score, thr, sign = _best_threshold(fn(tr0), fn(tr1), claim_delta)
            if chosen is None or score > chosen[0]:
                chosen = (score, pair, sname, thr, sign, (fn(te0), fn(te1)))
        if progress is not None:
            progress(f"audit {mech.name}: pair '{pair.name}' done")
    assert chosen is not None
    return _result(mech, images, chosen, trials, t_start, pairs, chosen[1].name)


def _result(mech: Mechanism, images: ImageSet, chosen: tuple, trials: int, t_start: float,
            pairs: list[NeighbourPair], pair_name: str) -> AuditResult:  # fmt: skip
    """The audit's record from the test ``chosen`` on the first halves: its errors counted on the held-out second
    halves, the Clopper–Pearson bound, and the verdict against the claim."""
    claim_eps, claim_delta = mech.audit_claim(images.shape)
    _, _, sname, thr, sign, (s0, s1) = chosen
    fp = int(np.sum(sign * s0 > sign * thr))
    fn_ = int(np.sum(sign * s1 <= sign * thr))
    bound = epsilon_lower_bound(fp, fn_, len(s0), len(s1), claim_delta)
    top = max_auditable_epsilon(len(s0), claim_delta)
    return AuditResult(
        method=mech.name,
        parameters=mech.parameters(),
        claimed_epsilon=claim_eps,
        claimed_delta=claim_delta,
        sound=mech.guarantee(images.shape).sound,
        unit=mech.neighbours().wording(),
        audited_epsilon_lower=bound,
        max_auditable_epsilon=top,
        trials=trials,
        verdict="no-claim" if claim_eps is None else ("violated" if bound > claim_eps else "consistent"),
        pair=pair_name,
        statistic=sname,
        false_positive_rate=fp / len(s0),
        false_negative_rate=fn_ / len(s1),
        seconds=time.perf_counter() - t_start,
        refutable=claim_eps is not None and claim_eps < top,
        perfect_distinguisher=fp == 0 and fn_ == 0,
        pairs_tried=[p.name for p in pairs],
    )


def _not_audited(mech: Mechanism, images: ImageSet, why: str) -> AuditResult:
    """The record of a mechanism this audit cannot run on: its claim and unit, NaN bounds, ``why`` as statistic."""
    claim_eps, claim_delta = mech.audit_claim(images.shape)
    nan = float("nan")
    return AuditResult(
        method=mech.name,
        parameters=mech.parameters(),
        claimed_epsilon=claim_eps,
        claimed_delta=claim_delta,
        sound=mech.guarantee(images.shape).sound,
        unit=mech.neighbours().wording(),
        audited_epsilon_lower=nan,
        max_auditable_epsilon=nan,
        trials=0,
        verdict="not-audited",
        pair="none",
        statistic=why,
        false_positive_rate=nan,
        false_negative_rate=nan,
        refutable=False,
    )


# ------------------------------------------------------------------------- mechanisms fitted on the private set


def _audit_refitted(
    mech: Mechanism,
    images: ImageSet,
    trials: int,
    seed: int,
    pairs: list[NeighbourPair],
    target: str,
    progress: Callable[[str], None] | None,
) -> AuditResult:
    """The audit of a mechanism whose guarantee covers its fit on a private set: every trial refits a copy on one
    side of a pair (two private sets differing in one image and its label).

    On the DP statistic the test is the projection on the difference of the two sides' noise-free statistics,
    the likelihood-ratio test of a Gaussian release, so the bound tracks the true ε, not a weak statistic's; only
    scalars are kept per trial. On the synthetic output the usual statistics are fitted on the first half. The
    data-independent randomness (random features) is the same in every trial; only the noise and, for outputs,
    the training vary."""
    t_start = time.perf_counter()
    claim_delta = mech.audit_claim(images.shape)[1]
    params = mech.get_params()
    fixed = int(np.random.default_rng(seed).integers(0, 2**31))
    use_stat = target != "output" and mech.released_statistic(pairs[0].a, None, seed=fixed) is not None
    if target == "statistic" and not use_stat:
        raise ParameterError(f"{mech.name}: has no released statistic to audit; use target='output'")
    rng = make_rng(seed)
    half = trials // 2
    chosen: tuple[float, NeighbourPair, str, float, int, tuple] | None = None
    for pair in pairs:
        if use_stat:
            c0 = np.asarray(mech.released_statistic(pair.a, None, seed=fixed), dtype=np.float64)
            c1 = np.asarray(mech.released_statistic(pair.b, None, seed=fixed), dtype=np.float64)
            v = c1 - c0
            if not np.any(v):
                continue  # the two sides release the same statistic: nothing to distinguish on this pair
            ref = float(c0 @ v)
            p0, p1 = (_projections(mech, side, v, trials, rng, fixed) for side in (pair.a, pair.b))
            stats_ = {
                "projection of the released statistic on its noise-free difference": (p0, p1),
                "|projection − its noise-free value under x₀|": (np.abs(p0 - ref), np.abs(p1 - ref)),
            }
        else:
            x0 = _refit_outputs(type(mech), params, pair.a, trials, rng)
            x1 = _refit_outputs(type(mech), params, pair.b, trials, rng)
            stats_ = {}
            for name, fn in _statistics(x0[:half], x1[:half]).items():
                stats_[f"{name} (synthetic images, refitted per trial)"] = (fn(x0), fn(x1))
        for sname, (s0, s1) in stats_.items():
            score, thr, sign = _best_threshold(s0[:half], s1[:half], claim_delta)
            if chosen is None or score > chosen[0]:
                chosen = (score, pair, sname, thr, sign, (s0[half:], s1[half:]))
        if progress is not None:
            progress(f"audit {mech.name}: pair '{pair.name}' done")
    if chosen is None:
        return _not_audited(mech, images, "not audited: no pair changes the released statistic")
    pair = chosen[1]
    return _result(mech, images, chosen, trials, t_start, pairs,
                   f"{pair.name} ({len(pair.a)} private images, refitted per trial)")  # fmt: skip


def _projections(mech: Mechanism, side: ImageSet, v: np.ndarray, trials: int, rng, fixed: int) -> np.ndarray:
    """(trials,) projections on ``v`` of the DP statistic released for ``side``, one noise draw per trial."""
    return np.array([float(mech.released_statistic(side, rng, seed=fixed) @ v) for _ in range(trials)])


def _refit_outputs(kind: type[Mechanism], params: dict[str, Any], side: ImageSet, trials: int, rng) -> np.ndarray:
    """(trials, k) float32: a fresh copy fitted on ``side`` (its own seed per trial), then the values of
    ``SYNTHETIC_PER_TRIAL`` images it synthesizes."""
    rows = []
    for _ in range(trials):
        fresh = kind(**params).fit(side, seed=int(rng.integers(0, 2**31)))
        rows.append(fresh.synthesize(SYNTHETIC_PER_TRIAL, rng, side.shape).values().ravel())
    return np.stack(rows).astype(np.float32)
