"""The audit entry point (:func:`audit`): which strategy applies (pairs of outputs, white-box trials, records, refits,
adaptive rounds)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.evaluation.audit.bounds import Candidate
from privpix.evaluation.audit.records import audit_records
from privpix.evaluation.audit.refit import audit_refitted
from privpix.evaluation.audit.result import CONFIDENCE, MAX_ADAPTIVE_TRIALS, NOT_AUDITED_MODEL, TARGETS, AuditResult
from privpix.evaluation.audit.trials import pair_candidates, trial_outputs, trial_selections
from privpix.evaluation.audit.verdicts import conclude, not_audited
from privpix.mechanisms.base import Auditable, Mechanism
from privpix.privacy.neighbours import NeighbourPair
from privpix.privacy.noise import make_rng


def audit(
    mech: Mechanism,
    images: ImageSet | RecordSet,
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
    (:meth:`~privpix.mechanisms.base.Auditable.released_statistic`, e.g. the noisy embedding: the strongest test, as
    everything after it is post-processing), ``"output"`` the images it then synthesizes (a whole fit per trial,
    so use few trials), ``"auto"`` the statistic when the mechanism has one. A mechanism that declares a white-box
    experiment (:attr:`~privpix.mechanisms.base.Auditable.white_box`: DP-SGD's model, dp-teacher) runs it for
    ``"auto"`` and ``"statistic"``, on the pair the experiment builds (``pairs`` is refused).

    ``trials`` releases per side of every pair (a share choose the tests, the rest measure them). Returns the
    lower bounds with ``confidence`` (95 % by default), the claim they are compared to (``mech.privacy``)
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


def _audit_once(mech: Mechanism, images: ImageSet | RecordSet, trials: int, seed: int,
                pairs: list[NeighbourPair] | None, progress: Callable[[str], None] | None, target: str,
                confidence: float) -> AuditResult:  # fmt: skip
    t_start = time.perf_counter()
    # A released model is only ever audited white-box (none declared: not audited); a mechanism that declares a
    # white-box experiment runs it, unless the output itself was asked for.
    white_box = isinstance(mech, Auditable) and mech.white_box
    if mech.capabilities().output == "model" or (white_box and target != "output"):
        if pairs is not None:
            raise ParameterError(
                f"pairs: {mech.name} is audited white-box, on the pair its own experiment builds; give no pairs"
            )
        if isinstance(images, RecordSet):  # its own experiment is on images (audit() let records through)
            raise ParameterError(f"audit: {mech.name} is audited white-box on images; give images")
        return _audit_white_box(mech, images, trials, seed, progress, confidence)
    if isinstance(images, RecordSet):
        return audit_records(mech, images, trials, seed, progress, confidence)
    rng = make_rng(seed)
    relation = mech.neighbours()
    pairs = pairs if pairs is not None else relation.pairs(images)
    if mech.capabilities().fits_on == "private" and relation.dataset_level:
        return audit_refitted(mech, images, trials, seed, pairs, target, progress, confidence)
    candidates: list[Candidate] = []
    for pair in pairs:
        x0 = trial_outputs(mech, pair.a, pair.index, trials, rng, relation.dataset_level)
        x1 = trial_outputs(mech, pair.b, pair.index, trials, rng, relation.dataset_level)
        candidates += pair_candidates(mech, images, pair, x0, x1, trials, progress)
    return conclude(mech, images, candidates, trials, t_start, pairs, confidence)


def _audit_white_box(mech: Mechanism, images: ImageSet, trials: int, seed: int,
                     progress: Callable[[str], None] | None, confidence: float) -> AuditResult:  # fmt: skip
    """A released model cannot be retrained thousands of times: the mechanism's own white-box experiment
    (:meth:`~privpix.mechanisms.base.Auditable.white_box_trials`) gives the trials, read like any other pair's."""
    t_start = time.perf_counter()
    wb = mech.white_box_trials(images, trials, seed) if isinstance(mech, Auditable) else None
    if wb is None:
        return not_audited(mech, images, NOT_AUDITED_MODEL)
    if progress is not None:
        progress(f"audit {mech.name}: {trials} white-box trials per side done")
    s0, s1 = np.asarray(wb.s0, dtype=np.float64), np.asarray(wb.s1, dtype=np.float64)
    candidates = [Candidate(wb.pair, wb.statistic, s0, s1, select, curve)
                  for select, curve in trial_selections(mech, images, trials)]  # fmt: skip
    res = conclude(mech, images, candidates, trials, t_start, [], confidence)
    res.pairs_tried = [wb.pair]
    return res
