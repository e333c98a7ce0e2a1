"""Audits of mechanisms that release records (tables): neighbouring record sets differ in one row replaced by any
other."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from privpix.data.imageset import RecordSet
from privpix.errors import ParameterError
from privpix.evaluation.audit.bounds import Candidate
from privpix.evaluation.audit.result import AuditResult
from privpix.evaluation.audit.trials import pair_candidates
from privpix.evaluation.audit.verdicts import conclude
from privpix.mechanisms.base import Mechanism
from privpix.mechanisms.kinds import RecordMechanism, require_kind
from privpix.privacy.neighbours import RecordPair
from privpix.privacy.noise import make_rng


def record_pairs(records: RecordSet) -> list[RecordPair]:
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
    pairs = [RecordPair("most vs least typical record", records.subset(np.array([lo])),
                           records.subset(np.array([hi])))]  # fmt: skip
    other = np.flatnonzero(records.labels != records.labels[lo])
    if len(other):
        near = int(other[np.argmin(np.linalg.norm(x[other] - x[lo], axis=1))])
        pairs.append(RecordPair("typical record vs the nearest with another label",
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


def audit_records(mech: Mechanism, records: RecordSet, trials: int, seed: int,
                   progress: Callable[[str], None] | None, confidence: float) -> AuditResult:  # fmt: skip
    """The audit of a mechanism releasing records: per-record pairs (:func:`record_pairs`), each record released
    ``trials`` times on each side, compared like images' pixels (every released column, a passed-through label
    included)."""
    t_start = time.perf_counter()
    releaser = require_kind(mech, RecordMechanism)
    rng = make_rng(seed)
    pairs = record_pairs(records)
    candidates: list[Candidate] = []
    for pair in pairs:
        frames = [
            releaser.release_records(side.subset(np.zeros(trials, dtype=int)), rng).frame for side in (pair.a, pair.b)
        ]
        x0, x1 = _record_values(frames, list(frames[0].columns))
        candidates += pair_candidates(mech, records, pair, x0, x1, trials, progress)
    return conclude(mech, records, candidates, trials, t_start, pairs, confidence)
