"""Audits of mechanisms fitted on the private set (synthesizers, GANs): every trial refits on one side of the pair, on
the workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.evaluation.audit.bounds import Candidate, fit_statistics
from privpix.evaluation.audit.result import CONFIDENCE, SYNTHETIC_PER_TRIAL, AuditResult
from privpix.evaluation.audit.trials import trial_selections
from privpix.evaluation.audit.verdicts import conclude
from privpix.mechanisms.base import Auditable, Mechanism
from privpix.mechanisms.kinds import SyntheticImageMechanism, require_kind
from privpix.privacy.neighbours import NeighbourPair
from privpix.privacy.noise import make_rng

# ------------------------------------------------------------------------- mechanisms fitted on the private set


def audit_refitted(
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
    stat = mech if isinstance(mech, Auditable) else None
    use_stat = (target != "output" and stat is not None
                and stat.released_statistic(pairs[0].a, None, seed=fixed) is not None)  # fmt: skip
    if target == "statistic" and not use_stat:
        raise ParameterError(f"{mech.name}: has no released statistic to audit; use target='output'")
    rng = make_rng(seed)
    selections = trial_selections(mech, images, trials)
    candidates: list[Candidate] = []
    for pair in pairs:
        label = f"{pair.name} ({len(pair.a)} private images, refitted per trial)"
        if use_stat:
            assert stat is not None
            c0 = np.asarray(stat.released_statistic(pair.a, None, seed=fixed), dtype=np.float64)
            c1 = np.asarray(stat.released_statistic(pair.b, None, seed=fixed), dtype=np.float64)
            v = c1 - c0
            if not np.any(v):
                continue  # the two sides release the same statistic: nothing to distinguish on this pair
            ref = float(c0 @ v)
            p0, p1 = (_projections(stat, side, v, trials, rng, fixed) for side in (pair.a, pair.b))
            for select, curve in selections:
                candidates += [
                    Candidate(label, "projection of the released statistic on its noise-free difference", p0, p1,
                               select, curve),
                    Candidate(label, "|projection of the released statistic − its noise-free value under x₀|",
                               np.abs(p0 - ref), np.abs(p1 - ref), select, curve),
                ]  # fmt: skip
        else:
            # Refitted outputs are synthetic images: a refitted mechanism of another kind has nothing to draw.
            kind = type(require_kind(mech, SyntheticImageMechanism))
            x0 = _refit_outputs(kind, params, pair.a, trials, rng)
            x1 = _refit_outputs(kind, params, pair.b, trials, rng)
            for select, curve in selections:
                for name, fn in fit_statistics(x0[:select], x1[:select]).items():
                    candidates.append(Candidate(label, f"{name} (synthetic images, refitted per trial)", fn(x0),
                                                 fn(x1), select, curve))  # fmt: skip
        if progress is not None:
            progress(f"audit {mech.name}: pair '{pair.name}' done")
    return conclude(mech, images, candidates, trials, t_start, pairs, confidence)


def _projections(mech: Auditable, side: ImageSet, v: np.ndarray, trials: int, rng, fixed: int) -> np.ndarray:
    """(trials,) projections on ``v`` of the DP statistic released for ``side``, one noise draw per trial."""
    return np.array([float(mech.released_statistic(side, rng, seed=fixed) @ v) for _ in range(trials)])


@dataclass(frozen=True)
class _RefitTrial:
    kind: type[SyntheticImageMechanism]
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


def _refit_outputs(
    kind: type[SyntheticImageMechanism], params: dict[str, Any], side: ImageSet, trials: int, rng
) -> np.ndarray:
    """(trials, k) float32: a fresh copy fitted on ``side`` per trial, then the values of ``SYNTHETIC_PER_TRIAL``
    images it synthesizes. The trials run on the active executor (``privpix audit --workers``), each seeded on
    its own from ``rng``, so the outputs do not depend on the number of workers."""
    from privpix.executor import active

    seeds = rng.integers(0, 2**63, size=trials)
    tasks = [_RefitTrial(kind, params, side, int(s)) for s in seeds]
    rows = dict(active().map_unordered(_refit_trial, tasks))
    return np.stack([rows[i] for i in range(trials)]).astype(np.float32)
