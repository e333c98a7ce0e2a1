"""From candidate tests to a verdict: the bounds, the claim they are compared with, the largest ε the trials could
refute (and how many trials a claim needs), and the not-audited record."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from privpix.data.imageset import ImageSet, RecordSet
from privpix.evaluation.audit.bounds import Candidate, bounds, ceiling
from privpix.evaluation.audit.curves import AnyCurve, curve_of
from privpix.evaluation.audit.result import (
    CONFIDENCE,
    CURVE_SELECT_SHARE,
    MAX_ADAPTIVE_TRIALS,
    RECORD_UNIT,
    SELECT_SHARE,
    AuditResult,
    data_shape,
    split_trials,
)
from privpix.mechanisms.base import Claim, Mechanism, UnstatedNoise
from privpix.privacy.neighbours import NeighbourPair, RecordPair


def max_auditable(mech: Mechanism, images: ImageSet, trials: int, confidence: float = CONFIDENCE) -> float:
    """The largest bound :func:`audit` with ``trials`` per side could show for ``mech`` (a test without a single
    held-out error), before running it: the larger of the raw and the curve ceilings."""
    held = (trials - split_trials(trials, SELECT_SHARE), trials - split_trials(trials, CURVE_SELECT_SHARE))
    return ceiling(*held, audited_claim(mech, images).delta, mechanism_curve(mech, images), confidence)


def trials_to_refute(mech: Mechanism, images: ImageSet, start: int, cap: int = MAX_ADAPTIVE_TRIALS) -> int:
    """The fewest of ``start``·2^j trials per side (at most ``cap``) whose audit could refute the claim, i.e. show
    a bound above it; ``start`` when there is no claim, and when even ``cap`` could not (more trials would not
    make the claim refutable, only the audit slower)."""
    claim = claimed(mech, images)[0]
    if claim is None:
        return start
    n = start
    while n < cap and max_auditable(mech, images, n) <= claim:
        n *= 2
    n = min(n, cap)
    return n if n == start or max_auditable(mech, images, n) > claim else start


def audited_claim(mech: Mechanism, images: ImageSet | RecordSet) -> Claim:
    """What ``mech`` claims for a release of images of the shape of ``images``, their number setting what it
    may set (a sampling rate) (:meth:`~privpix.mechanisms.Mechanism.privacy`). The images' shape, not the images:
    an audit tests the claim for images the mechanism has not learned from."""
    return mech.privacy(data_shape(images), len(images))


def claimed(mech: Mechanism, images: ImageSet | RecordSet) -> tuple[float | None, float]:
    """The (ε, δ) ``mech`` claims for one unit of its neighbours, also where its noise cannot be stated for
    these images (a DP fit whose batch is larger than the set): the claim does not depend on it."""
    claim = _stated_claim(mech, images)
    return claim.epsilon, claim.delta


def _stated_claim(mech: Mechanism, images: ImageSet | RecordSet) -> Claim:
    """:func:`audited_claim`, or the guarantee alone where the noise cannot be stated for these images."""
    try:
        return audited_claim(mech, images)
    except UnstatedNoise as exc:
        return Claim(exc.guarantee)


def mechanism_curve(mech: Mechanism, images: ImageSet | RecordSet) -> AnyCurve | None:
    """The trade-off curve an audit of ``mech`` on ``images`` reads its second bound through: the one the noise
    of its claim for one unit of its neighbours follows (:func:`~privpix.evaluation.audit.curves.curve_of`) at
    the claim's δ; ``None`` without that noise, or for a mechanism whose guarantee is not sound."""
    claim = audited_claim(mech, images)
    # A curve's assumption (Laplace noise with L1 sensitivity, Gaussian noise of Δ/σ) holds only for a sound
    # mechanism: a paper-faithful one with a data-derived scale is audited by the raw bound alone.
    if not claim.guarantee.sound:
        return None
    return curve_of(claim.unit_events, claim.delta, mech.neighbours().removes)


def conclude(mech: Mechanism, images: ImageSet | RecordSet, candidates: list[Candidate], trials: int, t_start: float,
              pairs: Sequence[NeighbourPair] | Sequence[RecordPair], confidence: float) -> AuditResult:  # fmt: skip
    """The record of :func:`bounds` on ``candidates``: the verdict against the claim and what it rests on."""
    if not candidates:
        return not_audited(mech, images, "not audited: no pair changes the released statistic")
    claim = audited_claim(mech, images)
    claim_eps, claim_delta = claim.epsilon, claim.delta
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


def claim_fields(mech: Mechanism, images: ImageSet | RecordSet) -> dict[str, Any]:
    """The fields of an :class:`AuditResult` that say what was claimed, for whom, and whether it is sound."""
    claim = _stated_claim(mech, images)
    claim_eps, claim_delta = claim.epsilon, claim.delta
    return {
        "method": mech.name,
        "parameters": mech.get_params(),
        "claimed_epsilon": claim_eps,
        "claimed_delta": claim_delta,
        "sound": claim.guarantee.sound,
        "unit": RECORD_UNIT if isinstance(images, RecordSet) else mech.neighbours().wording(),
    }


def not_audited(mech: Mechanism, images: ImageSet | RecordSet, why: str) -> AuditResult:
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
