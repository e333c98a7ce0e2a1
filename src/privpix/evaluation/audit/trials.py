"""Neighbour pairs and the trials run on them: the mechanism's outputs on each side, the candidate tests, and the split
of trials into selection and held-out."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.evaluation.audit.bounds import Candidate, fit_statistics
from privpix.evaluation.audit.result import CURVE_SELECT_SHARE, RELEASE_CHUNK, SELECT_SHARE, split_trials
from privpix.evaluation.audit.verdicts import mechanism_curve
from privpix.mechanisms.base import Mechanism
from privpix.privacy.neighbours import NeighbourPair, RecordPair

# -------------------------------------------------------------------------------------- neighbours


def neighbour_pairs(mech: Mechanism, images: ImageSet) -> list[NeighbourPair]:
    """Candidate worst-case neighbour pairs for the relation ``mech`` declares, built from ``images``."""
    return mech.neighbours().pairs(images)


# ------------------------------------------------------------------------------------------ trials


def trial_outputs(
    mech: Mechanism, pair_side: ImageSet, index: int, trials: int, rng, dataset_level: bool
) -> np.ndarray:
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


def pair_candidates(mech: Mechanism, data: ImageSet | RecordSet, pair: NeighbourPair | RecordPair,
                     x0: np.ndarray, x1: np.ndarray, trials: int,
                     progress: Callable[[str], None] | None) -> list[Candidate]:  # fmt: skip
    """Every statistic of one pair's outputs (``x0``, ``x1``: trials × values), fitted on each test's selection
    trials, as candidates for the raw and the curve test."""
    out = []
    for select, curve in trial_selections(mech, data, trials):
        for sname, fn in fit_statistics(x0[:select], x1[:select]).items():
            out.append(Candidate(pair.name, sname, fn(x0), fn(x1), select, curve))
    if progress is not None:
        progress(f"audit {mech.name}: pair '{pair.name}' done")
    return out


def trial_selections(mech: Mechanism, images: ImageSet | RecordSet, trials: int) -> list[tuple[int, bool]]:
    """(selection trials, for the curve test?) of each test the audit runs: the raw test chooses on half the
    trials; the curve test, when the mechanism has a curve, on a fifth (its bound lives on the held-out count)."""
    out = [(split_trials(trials, SELECT_SHARE), False)]
    if mechanism_curve(mech, images) is not None:
        out.append((split_trials(trials, CURVE_SELECT_SHARE), True))
    return out
