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

Beside that assumption-free bound, a mechanism that declares its noise family (``Capabilities.noise_family``) is
also read through that family's trade-off curve (:mod:`privpix.evaluation.curves`): a second test, the one with
the smallest balanced error on the selection trials, gives an upper bound on its mean error rate, and the largest
ε whose curve allows that rate is a lower bound under the curve's stated assumption. It reaches ε near 10 with a
few thousand trials where the raw bound stops near ln(n / 4). The two share the 95 %: each is computed at 97.5 %,
so the verdict ("violated" when either bound exceeds the claim, ``refuted_by`` saying which) keeps its level.
The raw test is chosen on the first half of the trials, the curve test on the first fifth (each on at most
8,000).

Neighbour pairs are worst cases where the unit allows: an all-black image against one with a white column,
pixel block or whole image (data-derived noise scales vanish on a black image), and the dataset's most
typical image against its least typical one; for a claim per encoded feature, two images whose encodings
differ in one value. Releases are compared through ``Release.values()``: pixels, or the report values of a
mechanism that releases features. For mechanisms whose output depends on the whole batch
(``dataset`` unit) the pair is two datasets that differ in one image: ``batch`` copies of one image (a
degenerate, zero-range batch) and a real batch, each against the same with one image replaced.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.evaluation.curves import AnyCurve, composed_curve, curve_for, pooled_error_upper
from privpix.mechanisms.base import Mechanism
from privpix.neighbours import NeighbourPair
from privpix.noise import make_rng

CONFIDENCE = 0.95
# Share of the trials that choose each test: half for the raw test; a fifth for the curve test, whose bound lives
# on the held-out count of errors (measured in benchmarks/audit_power.py).
SELECT_SHARE, CURVE_SELECT_SHARE = 0.5, 0.2
# ... and at most this many: beyond it a test is chosen no better, while every held-out trial raises the bound's
# ceiling (a raw bound of 10 needs about 81,000 held-out trials per side).
SELECT_CAP = 8000
# Adaptive audits double the trials per round up to this many per side (memory: the outputs of one side).
MAX_ADAPTIVE_TRIALS = 128_000
# Per-image releases are drawn this many at a time (an audit of fewer trials is one call, as before).
RELEASE_CHUNK = 16_384
TARGETS = ("auto", "statistic", "output")
# Synthetic images drawn per trial when a refitted synthesizer's output is audited.
SYNTHETIC_PER_TRIAL = 16
VERDICTS = ("consistent", "violated", "no-claim", "not-audited")
# Why a mechanism whose Capabilities.output is "model" gets no bound: its release is a model fitted once on the
# training set, and this audit compares releases of neighbouring images (no retraining per trial).
NOT_AUDITED_MODEL = (
    "not audited here: model output with no white-box experiment (this audit compares released images or reports, "
    "not models); use the one-run audit (`privpix audit --one-run N`, privpix.evaluation.one_run)"
)


@dataclass
class AuditResult:
    """Outcome of :func:`audit`; ``to_dict`` is the JSON of ``privpix audit --json``.

    ``audited_epsilon_lower`` is the larger of ``raw_epsilon_lower`` (Clopper–Pearson on one test's two error
    rates, no assumption) and ``curve_epsilon_lower`` (the balanced error of a second test read through
    ``curve``, valid under ``curve_assumption``; NaN when the mechanism declares no noise family). ``refuted_by``
    names the bound(s) above the claim. ``refutable`` is false when the claimed ε is at or above
    ``max_auditable_epsilon`` (the larger of the two bounds' ceilings): then "consistent" carries no
    information. ``kind``: ``"trials"`` (releases per side of neighbour pairs) or ``"one-run"``
    (:func:`privpix.evaluation.one_run.audit_one_run`). ``rounds`` > 1: an adaptive audit (``budget_seconds``),
    the record of its last round.
    ``perfect_distinguisher`` is true when the held-out test made no error at all:
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
    raw_epsilon_lower: float = float("nan")
    curve: str = ""
    curve_assumption: str = ""
    curve_epsilon_lower: float = float("nan")
    curve_statistic: str = ""
    curve_error_rate: float = float("nan")
    refuted_by: str = ""
    rounds: int = 1
    kind: str = "trials"
    overall_confidence: float = CONFIDENCE

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
        # In chunks, so a mechanism's working copies (float64, transforms) stay those of one chunk.
        parts = []
        for start in range(0, trials, RELEASE_CHUNK):
            reps = pair_side.subset(np.zeros(min(RELEASE_CHUNK, trials - start), dtype=int))
            parts.append(mech.release(reps, rng).values())
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
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
class _Candidate:
    """One (pair, statistic): its scalar value in every trial on each side; the first ``select`` trials chose
    the statistic and choose the test, the rest measure it. ``curve``: a candidate for the balanced (curve) test,
    else for the raw one."""

    pair_label: str
    statistic: str
    s0: np.ndarray
    s1: np.ndarray
    select: int
    curve: bool = False


def audit(
    mech: Mechanism,
    images: ImageSet,
    trials: int = 2000,
    seed: int = 0,
    pairs: list[NeighbourPair] | None = None,
    progress: Callable[[str], None] | None = None,
    target: str = "auto",
    confidence: float = CONFIDENCE,
    budget_seconds: float | None = None,
) -> AuditResult:
    """Audit ``mech`` on neighbour pairs built from ``images`` (see :func:`neighbour_pairs`).

    A mechanism that fits on the private set under a dataset-level relation (a DP synthesizer) is refitted on
    each side of a pair in every trial: ``target="statistic"`` compares the one DP release its fit makes
    (:meth:`~privpix.mechanisms.Mechanism.released_statistic`, e.g. the noisy embedding: the strongest test, as
    everything after it is post-processing), ``"output"`` the images it then synthesizes (a whole fit per trial,
    so use few trials), ``"auto"`` the statistic when the mechanism has one.

    ``trials`` releases per side of every pair (a share choose the tests, the rest measure them). Returns the
    lower bounds with ``confidence`` (95 % by default), the claim they are compared to (``mech.audit_claim``)
    and the verdict: ``violated`` when a bound exceeds the claimed ε, ``consistent`` otherwise, ``no-claim``
    when the mechanism states no ε, ``not-audited`` (NaN bounds, no trials, ``statistic`` saying why) for a
    mechanism whose output is a model.

    ``budget_seconds``: an adaptive audit. Round j (j = 1, 2, ...) runs ``trials``·2^(j−1) trials per side at
    confidence 1 − (1 − ``confidence``)·2^−j, with fresh randomness, and the audit stops at the first round that
    refutes the claim, or when the next round would overrun the budget (or pass ``MAX_ADAPTIVE_TRIALS``). The
    levels sum to at most 1 − ``confidence``, so a "violated" from any round holds at ``confidence`` (a union
    bound over rounds; no assumption on when the audit stops). The last round's record is returned.
    """
    if trials < 20:
        raise ParameterError(f"trials must be >= 20, got {trials}")
    if isinstance(images, RecordSet):
        if mech.capabilities().fits_on == "model-file" and not mech.is_fitted:
            mech.fit(None)  # a named model file says what the mechanism releases (images or records)
        if mech.capabilities().output != "records":
            raise ParameterError(f"audit: {mech.name} releases {mech.capabilities().output}, not records; give images")
    elif not isinstance(images, ImageSet):
        raise ParameterError("audit: images must be an ImageSet (or a RecordSet for a mechanism releasing records)")
    if not 0.5 <= confidence < 1:
        raise ParameterError(f"confidence must be in [0.5, 1), got {confidence}")
    if target not in TARGETS:
        raise ParameterError(f"target must be one of {TARGETS}, got {target!r}")
    if budget_seconds is None:
        return _audit_once(mech, images, trials, seed, pairs, progress, target, confidence)
    if not budget_seconds > 0:
        raise ParameterError(f"budget_seconds must be positive, got {budget_seconds}")
    t0, j, n = time.perf_counter(), 1, trials
    while True:
        level = 1.0 - (1.0 - confidence) * 2.0**-j
        res = _audit_once(mech, images, n, seed + j - 1, pairs, progress, target, level)
        this_round, spent = res.seconds, time.perf_counter() - t0
        res.rounds, res.seconds, res.overall_confidence = j, spent, confidence
        if progress is not None:
            progress(f"audit {mech.name}: round {j}, {n} trials, bound {res.audited_epsilon_lower:.3g}")
        # The next round doubles the trials: about twice this one's time.
        if res.verdict != "consistent" or spent + 2 * this_round > budget_seconds or 2 * n > MAX_ADAPTIVE_TRIALS:
            return res
        j, n = j + 1, 2 * n


def _audit_once(mech: Mechanism, images: ImageSet, trials: int, seed: int, pairs: list[NeighbourPair] | None,
                progress: Callable[[str], None] | None, target: str, confidence: float) -> AuditResult:  # fmt: skip
    t_start = time.perf_counter()
    if mech.capabilities().output == "model":
        return _audit_white_box(mech, images, trials, seed, progress, confidence)
    if isinstance(images, RecordSet):
        return _audit_records(mech, images, trials, seed, progress, confidence)
    rng = make_rng(seed)
    relation = mech.neighbours()
    pairs = pairs if pairs is not None else relation.pairs(images)
    if mech.capabilities().fits_on == "private" and relation.dataset_level:
        return _audit_refitted(mech, images, trials, seed, pairs, target, progress, confidence)
    candidates: list[_Candidate] = []
    for pair in pairs:
        x0 = _outputs(mech, pair.a, pair.index, trials, rng, relation.dataset_level)
        x1 = _outputs(mech, pair.b, pair.index, trials, rng, relation.dataset_level)
        candidates += _pair_candidates(mech, images, pair, x0, x1, trials, progress)
    return _conclude(mech, images, candidates, trials, t_start, pairs, confidence)


def _pair_candidates(mech: Mechanism, data: ImageSet | RecordSet, pair: NeighbourPair, x0: np.ndarray, x1: np.ndarray,
                     trials: int, progress: Callable[[str], None] | None) -> list[_Candidate]:  # fmt: skip
    """Every statistic of one pair's outputs (``x0``, ``x1``: trials × values), fitted on each test's selection
    trials, as candidates for the raw and the curve test."""
    out = []
    for select, curve in _selections(mech, data, trials):
        for sname, fn in _statistics(x0[:select], x1[:select]).items():
            out.append(_Candidate(pair.name, sname, fn(x0), fn(x1), select, curve))
    if progress is not None:
        progress(f"audit {mech.name}: pair '{pair.name}' done")
    return out


def _audit_white_box(mech: Mechanism, images: ImageSet, trials: int, seed: int,
                     progress: Callable[[str], None] | None, confidence: float) -> AuditResult:  # fmt: skip
    """A released model cannot be retrained thousands of times: the mechanism's own white-box experiment
    (:meth:`~privpix.mechanisms.Mechanism.white_box_trials`) gives the trials, read like any other pair's."""
    t_start = time.perf_counter()
    wb = mech.white_box_trials(images, trials, seed)
    if wb is None:
        return not_audited(mech, images, NOT_AUDITED_MODEL)
    if progress is not None:
        progress(f"audit {mech.name}: {trials} white-box trials per side done")
    s0, s1 = np.asarray(wb.s0, dtype=np.float64), np.asarray(wb.s1, dtype=np.float64)
    candidates = [_Candidate(wb.pair, wb.statistic, s0, s1, select, curve)
                  for select, curve in _selections(mech, images, trials)]  # fmt: skip
    res = _conclude(mech, images, candidates, trials, t_start, [], confidence)
    res.pairs_tried = [wb.pair]
    return res


def max_auditable(mech: Mechanism, images: ImageSet, trials: int, confidence: float = CONFIDENCE) -> float:
    """The largest bound :func:`audit` with ``trials`` per side could show for ``mech`` (a test without a single
    held-out error), before running it: the larger of the raw and the curve ceilings."""
    held = (trials - _split(trials, SELECT_SHARE), trials - _split(trials, CURVE_SELECT_SHARE))
    return _ceiling(*held, mech.audit_claim(_shape(images))[1], mechanism_curve(mech, images), confidence)


def _ceiling(held_raw: int, held_curve: int, claim_delta: float, curve: AnyCurve | None, confidence: float) -> float:
    """The largest bound a test without a held-out error can show: the raw test measured on ``held_raw`` trials
    per side, the curve test (when there is a curve) on ``held_curve``, at the levels :func:`bounds` uses."""
    gamma = 1.0 - confidence
    g_raw = gamma / 2 if curve is not None else gamma
    top = max_auditable_epsilon(held_raw, claim_delta, g_raw / 2)
    if curve is not None:
        top = max(top, curve.epsilon(pooled_error_upper(0, 2 * held_curve, gamma / 2)))
    return top


def trials_to_refute(mech: Mechanism, images: ImageSet, start: int, cap: int = MAX_ADAPTIVE_TRIALS) -> int:
    """The fewest of ``start``·2^j trials per side (at most ``cap``) whose audit could refute the claim, i.e. show
    a bound above it; ``start`` when there is no claim, and when even ``cap`` could not (more trials would not
    make the claim refutable, only the audit slower)."""
    claim = mech.audit_claim(_shape(images))[0]
    if claim is None:
        return start
    n = start
    while n < cap and max_auditable(mech, images, n) <= claim:
        n *= 2
    n = min(n, cap)
    return n if n == start or max_auditable(mech, images, n) > claim else start


def mechanism_curve(mech: Mechanism, images: ImageSet | RecordSet) -> AnyCurve | None:
    """The trade-off curve an audit of ``mech`` on ``images`` reads its second bound through: the declared
    composition (:meth:`~privpix.mechanisms.Mechanism.noise_composition`), else the declared noise family's curve
    at the claim's δ; ``None`` without either, or for a mechanism whose guarantee is not sound."""
    # A curve's assumption (Laplace noise with L1 sensitivity, Gaussian noise of Δ/σ) holds only for a sound
    # mechanism: a paper-faithful one with a data-derived scale is audited by the raw bound alone.
    if not mech.guarantee(_shape(images)).sound:
        return None
    delta = mech.audit_claim(_shape(images))[1]
    parts = mech.noise_composition(images)
    if parts:
        return composed_curve(parts, delta)
    return curve_for(mech.capabilities().noise_family, delta)


def _split(trials: int, share: float) -> int:
    return min(trials - 10, max(10, min(SELECT_CAP, int(trials * share))))


def _selections(mech: Mechanism, images: ImageSet, trials: int) -> list[tuple[int, bool]]:
    """(selection trials, for the curve test?) of each test the audit runs: the raw test chooses on half the
    trials; the curve test, when the mechanism has a curve, on a fifth (its bound lives on the held-out count)."""
    out = [(_split(trials, SELECT_SHARE), False)]
    if mechanism_curve(mech, images) is not None:
        out.append((_split(trials, CURVE_SELECT_SHARE), True))
    return out


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
    raw_test: _Candidate
    false_positives: int
    false_negatives: int
    held_out: int
    curve_test: _Candidate | None
    curve_errors: int

    @property
    def epsilon_lower(self) -> float:
        """The larger of the two bounds (the raw one when there is no curve)."""
        c = self.curve_epsilon_lower
        return self.raw_epsilon_lower if math.isnan(c) else max(self.raw_epsilon_lower, c)


def bounds(candidates: list[_Candidate], claim_delta: float, curve: AnyCurve | None,
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
    top = _ceiling(len(h0), 0 if cc is None else len(cc.s0) - cc.select, claim_delta, curve, confidence)
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
    cands = [_Candidate("samples", "the value", s0, s1, _split(len(s0), SELECT_SHARE))]
    if curve is not None:
        cands.append(_Candidate("samples", "the value", s0, s1, _split(len(s0), CURVE_SELECT_SHARE), True))
    return bounds(cands, claim_delta, curve, confidence)


def _conclude(mech: Mechanism, images: ImageSet, candidates: list[_Candidate], trials: int, t_start: float,
              pairs: list[NeighbourPair], confidence: float) -> AuditResult:  # fmt: skip
    """The record of :func:`bounds` on ``candidates``: the verdict against the claim and what it rests on."""
    if not candidates:
        return not_audited(mech, images, "not audited: no pair changes the released statistic")
    claim_eps, claim_delta = mech.audit_claim(_shape(images))
    curve = mechanism_curve(mech, images)
    b = bounds(candidates, claim_delta, curve, confidence)
    refuted = [] if claim_eps is None else [
        name for name, v in (("raw", b.raw_epsilon_lower), ("curve", b.curve_epsilon_lower))
        if not math.isnan(v) and v > claim_eps
    ]  # fmt: skip
    cc = b.curve_test
    n_pooled = 0 if cc is None else 2 * (trials - cc.select)
    return AuditResult(
        **claim_fields(mech, images),
        audited_epsilon_lower=b.epsilon_lower,
        max_auditable_epsilon=b.max_auditable_epsilon,
        trials=trials,
        verdict="no-claim" if claim_eps is None else ("violated" if refuted else "consistent"),
        pair=b.raw_test.pair_label,
        statistic=b.raw_test.statistic,
        false_positive_rate=b.false_positives / b.held_out,
        false_negative_rate=b.false_negatives / b.held_out,
        seconds=time.perf_counter() - t_start,
        refutable=claim_eps is not None and claim_eps < b.max_auditable_epsilon,
        perfect_distinguisher=(b.false_positives == 0 and b.false_negatives == 0)
        or (cc is not None and b.curve_errors == 0),
        confidence=confidence,
        pairs_tried=[p.name for p in pairs],
        raw_epsilon_lower=b.raw_epsilon_lower,
        curve="" if curve is None else curve.name,
        curve_assumption="" if curve is None else curve.assumption,
        curve_epsilon_lower=b.curve_epsilon_lower,
        curve_statistic="" if cc is None else f"{cc.pair_label}; {cc.statistic}",
        curve_error_rate=float("nan") if cc is None else b.curve_errors / n_pooled,
        refuted_by=" and ".join(refuted),
    )


def claim_fields(mech: Mechanism, images: ImageSet) -> dict[str, Any]:
    """The fields of an :class:`AuditResult` that say what was claimed, for whom, and whether it is sound."""
    claim_eps, claim_delta = mech.audit_claim(_shape(images))
    return {
        "method": mech.name,
        "parameters": mech.parameters(),
        "claimed_epsilon": claim_eps,
        "claimed_delta": claim_delta,
        "sound": mech.guarantee(_shape(images)).sound,
        "unit": RECORD_UNIT if isinstance(images, RecordSet) else mech.neighbours().wording(),
    }


# Records have no image shape: a mechanism's guarantee for records is the one at this shape (as release_records).
RECORD_SHAPE = (0, 0, 0)
RECORD_UNIT = "one record (replaced by any other)"


def _shape(data: ImageSet | RecordSet) -> tuple[int, int, int]:
    return RECORD_SHAPE if isinstance(data, RecordSet) else data.shape


def record_pairs(records: RecordSet) -> list[NeighbourPair]:
    """Neighbour pairs of single records (replace-one): the most typical record against the least typical one,
    and against the nearest record with another label (whatever the release lets through of the label). Typical
    by the distance of the one-hot / numeric encoding to its mean, numeric columns scaled to [0, 1]."""
    if len(records) < 2:
        raise ParameterError("audit: records need at least 2 rows to build neighbour pairs")
    x, _ = records.one_hot()
    span = x.max(axis=0) - x.min(axis=0)
    x = (x - x.min(axis=0)) / np.where(span > 0, span, 1.0)
    dist = np.linalg.norm(x - x.mean(axis=0), axis=1)
    lo, hi = int(np.argmin(dist)), int(np.argmax(dist))
    pairs = [NeighbourPair("most vs least typical record", records.subset(np.array([lo])),
                           records.subset(np.array([hi])))]  # fmt: skip
    other = np.flatnonzero(records.labels != records.labels[lo])
    if len(other):
        near = int(other[np.argmin(np.linalg.norm(x[other] - x[lo], axis=1))])
        pairs.append(NeighbourPair("typical record vs the nearest with another label",
                                   records.subset(np.array([lo])), records.subset(np.array([near]))))  # fmt: skip
    return pairs


def _record_values(frames: list, columns: list[str]) -> list[np.ndarray]:
    """The released frames as float arrays with the same columns: numbers as they are, other columns (a label
    passed through) as a fixed hash of the value's text. Not codes numbered as values appear: an order of
    appearance would tell held-out values from those the tests were chosen on."""
    import zlib

    import pandas as pd

    out = []
    for f in frames:
        cols = []
        for col in columns:
            v = f[col]
            if pd.api.types.is_numeric_dtype(v):
                cols.append(v.to_numpy(np.float64))
            else:
                cols.append(np.array([zlib.crc32(str(x).encode()) % 1_000_003 for x in v], dtype=np.float64))
        out.append(np.stack(cols, axis=1).astype(np.float32))
    return out


def _audit_records(mech: Mechanism, records: RecordSet, trials: int, seed: int,
                   progress: Callable[[str], None] | None, confidence: float) -> AuditResult:  # fmt: skip
    """The audit of a mechanism releasing records: per-record pairs (:func:`record_pairs`), each record released
    ``trials`` times on each side, compared like images' pixels (every released column, a passed-through label
    included)."""
    t_start = time.perf_counter()
    rng = make_rng(seed)
    pairs = record_pairs(records)
    candidates: list[_Candidate] = []
    for pair in pairs:
        frames = [
            mech.release_records(side.subset(np.zeros(trials, dtype=int)), rng).frame for side in (pair.a, pair.b)
        ]
        x0, x1 = _record_values(frames, list(frames[0].columns))
        candidates += _pair_candidates(mech, records, pair, x0, x1, trials, progress)
    return _conclude(mech, records, candidates, trials, t_start, pairs, confidence)


def not_audited(mech: Mechanism, images: ImageSet, why: str) -> AuditResult:
    """The record of a mechanism this audit cannot run on: its claim and unit, NaN bounds, ``why`` as statistic."""
    nan = float("nan")
    return AuditResult(
        **claim_fields(mech, images),
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
    confidence: float = CONFIDENCE,
) -> AuditResult:
    """The audit of a mechanism whose guarantee covers its fit on a private set: every trial refits a copy on one
    side of a pair (two private sets differing in one image and its label).

    On the DP statistic the test is the projection on the difference of the two sides' noise-free statistics,
    the likelihood-ratio test of a Gaussian release, so the bound tracks the true ε, not a weak statistic's; only
    scalars are kept per trial. On the synthetic output the usual statistics are fitted on the selection trials.
    The data-independent randomness (random features) is the same in every trial; only the noise and, for
    outputs, the training vary."""
    t_start = time.perf_counter()
    params = mech.get_params()
    fixed = int(np.random.default_rng(seed).integers(0, 2**31))
    use_stat = target != "output" and mech.released_statistic(pairs[0].a, None, seed=fixed) is not None
    if target == "statistic" and not use_stat:
        raise ParameterError(f"{mech.name}: has no released statistic to audit; use target='output'")
    rng = make_rng(seed)
    selections = _selections(mech, images, trials)
    candidates: list[_Candidate] = []
    for pair in pairs:
        label = f"{pair.name} ({len(pair.a)} private images, refitted per trial)"
        if use_stat:
            c0 = np.asarray(mech.released_statistic(pair.a, None, seed=fixed), dtype=np.float64)
            c1 = np.asarray(mech.released_statistic(pair.b, None, seed=fixed), dtype=np.float64)
            v = c1 - c0
            if not np.any(v):
                continue  # the two sides release the same statistic: nothing to distinguish on this pair
            ref = float(c0 @ v)
            p0, p1 = (_projections(mech, side, v, trials, rng, fixed) for side in (pair.a, pair.b))
            for select, curve in selections:
                candidates += [
                    _Candidate(label, "projection of the released statistic on its noise-free difference", p0, p1,
                               select, curve),
                    _Candidate(label, "|projection of the released statistic − its noise-free value under x₀|",
                               np.abs(p0 - ref), np.abs(p1 - ref), select, curve),
                ]  # fmt: skip
        else:
            x0 = _refit_outputs(type(mech), params, pair.a, trials, rng)
            x1 = _refit_outputs(type(mech), params, pair.b, trials, rng)
            for select, curve in selections:
                for name, fn in _statistics(x0[:select], x1[:select]).items():
                    candidates.append(_Candidate(label, f"{name} (synthetic images, refitted per trial)", fn(x0),
                                                 fn(x1), select, curve))  # fmt: skip
        if progress is not None:
            progress(f"audit {mech.name}: pair '{pair.name}' done")
    return _conclude(mech, images, candidates, trials, t_start, pairs, confidence)


def _projections(mech: Mechanism, side: ImageSet, v: np.ndarray, trials: int, rng, fixed: int) -> np.ndarray:
    """(trials,) projections on ``v`` of the DP statistic released for ``side``, one noise draw per trial."""
    return np.array([float(mech.released_statistic(side, rng, seed=fixed) @ v) for _ in range(trials)])


@dataclass(frozen=True)
class _RefitTrial:
    kind: type[Mechanism]
    params: dict[str, Any]
    side: ImageSet
    seed: int


def _refit_trial(trial: _RefitTrial) -> np.ndarray:
    """One trial: a fresh copy fitted on the side, then the values of the images it synthesizes; every draw from
    the trial's own seed, so the trial gives the same output wherever it runs."""
    from privpix.threads import one_thread

    with one_thread():  # as every fit: the trial's output does not depend on where it ran
        rng = np.random.default_rng(trial.seed)
        fresh = trial.kind(**trial.params).fit(trial.side, seed=int(rng.integers(0, 2**31)))
        return fresh.synthesize(SYNTHETIC_PER_TRIAL, rng, trial.side.shape).values().ravel()


def _refit_outputs(kind: type[Mechanism], params: dict[str, Any], side: ImageSet, trials: int, rng) -> np.ndarray:
    """(trials, k) float32: a fresh copy fitted on ``side`` per trial, then the values of ``SYNTHETIC_PER_TRIAL``
    images it synthesizes. The trials run on the active executor (``privpix audit --workers``), each seeded on
    its own from ``rng``, so the outputs do not depend on the number of workers."""
    from privpix.executor import active

    seeds = rng.integers(0, 2**63, size=trials)
    tasks = [_RefitTrial(kind, params, side, int(s)) for s in seeds]
    rows = dict(active().map_unordered(_refit_trial, tasks))
    return np.stack([rows[i] for i in range(trials)]).astype(np.float32)
