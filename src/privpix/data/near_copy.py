"""Near copies: private images that are a public image resized, re-encoded, brightened or lightly cropped.

The SHA-256 of :mod:`privpix.data.overlap` finds identical pixels only. A face published at 125×125 and resized
back to the private set's shape, a JPEG re-encoding or a crop of a few per cent per side changes every pixel, and
no digest matches. This module compares what survives those changes: the image's layout at low resolution.

Every image becomes a grey thumbnail (area average to ``THUMB``×``THUMB``, :func:`thumbnails`). A private image
is compared with crops of a public thumbnail (each side cut by 0 to ``MAX_CUT`` of the public image) resized to
``SIDE``×``SIDE``, by *whitened* correlation: each descriptor loses its mean and contrast (so brightness and
contrast changes do not matter), then the directions that the images of the sets share (the generic layout of a
face, say) are scaled down by the covariance of the sets' own descriptors. Two different faces agree on the
generic layout and no longer correlate after that; a copy agrees on every detail and still does.

The search has three steps, so that 4,000 private images against 2,000 public ones take a second or two on
one core: every pair at ``PROBE``×``PROBE`` against a few crops of each public image, to find each private
image's ``CANDIDATES`` nearest public images; those pairs at ``SIDE``×``SIDE`` over a grid of crops (each side
cut by 0, 5 or 10 %); then, for the pairs close to the threshold, a descent on the four cuts with finer steps.

A private image is a near copy when that score reaches ``BAR``. That presumes public images that differ from
each other: faces do (among 2,000 LFW faces, 0.4 % have another one scoring ``ALIKE`` or more, and those are
copies inside LFW or frames of one shoot), but handwritten digits, garment silhouettes or one person's photos
in one studio (ORL, Yale) are alike without being copies (5.8 to 23 %). Where more than ``ALIKE_LIMIT`` of the
public images have such a neighbour (:func:`bar`), a near copy cannot be told from a different image of the
same kind, and none is looked for: only identical pixels are found there.

Not caught: mirrored or rotated copies, a private image that shows more than the public one (the public image is
a crop of it), heavier edits, and, less and less, crops of more than 10 % per side (of crops up to 15 % per side,
94 % are found; up to 20 %, 39 %). The measured detection and false-match rates are in
benchmarks/results/public_overlap.md. The time grows as the product of the two sets' sizes.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from privpix.data.content_memo import by_content
from privpix.threads import one_thread

# Side of the grey thumbnail every image is first reduced to: 6,000 of them take 24 MB, and a 16×16 crop of it is
# still a fair picture of that crop.
THUMB = 32
# Side at which pairs are compared, and at which each private image's candidates are found.
SIDE = 16
PROBE = 8
# Nearest public images (by the probe) that each private image is compared with at SIDE.
CANDIDATES = 3
# The probe's crops (rows span × columns span): a crop of up to 10 % per side leaves the centre within 5 % of one
# of these (measured: each of 2,000 LFW faces so cropped had its original among its 3 candidates).
PROBE_SPANS = ((0.0, 0.1), (0.05, 0.05), (0.1, 0.0))
# The comparison's grid: each side of the public image cut by one of CUTS (fractions of its height or width);
# then, for pairs within REFINE_BELOW of the threshold, steps of STEPS on one side at a time, up to MAX_CUT.
CUTS = (0.0, 0.05, 0.1)
STEPS = (0.025, 0.0125, 0.00625)
MAX_CUT = 0.15
REFINE_BELOW = 0.3
# Whitening: eigenvalues of the descriptors' covariance are floored at RIDGE × their mean, so that directions with
# almost no variance are not blown up into noise; the TOP leading directions are scaled each by its own, the rest
# share the floor (the whitened norm of a crop is then a cheap projection).
RIDGE = 0.03
TOP = 64
# The covariance is shrunk towards that of a smooth image, as if PRIOR_WEIGHT such images were in the sample (see
# _Whitening: what keeps small sets from being whitened by their own few images).
PRIOR_RHO = 0.7
PRIOR_WEIGHT = 1000
# The bar (benchmarks/results/public_overlap.md): each of 2,000 LFW faces resized (to 64, 125 or 180 pixels),
# JPEG re-encoded (quality 75 or 50), brightened or darkened, or cropped by up to 10 % per side (with or without
# re-encoding) scores at least 0.936 against the face it was made from, all but 2 in 1,000 of each kind 0.954;
# a different face at most 0.70 (4,559 CelebA faces against the LFW ones, LFW and CelebA people against other
# people of their set), another photo of the same person 0.84, but for two frames of one shoot (0.95, flagged).
# 0.9 leaves the copies 0.036 and the different faces 0.2.
BAR = 0.9
# The public set's own images: the share of them with another public image scoring ALIKE or more, above which
# near copies are not looked for (faces in LFW and CelebA: 0.4 and 0.6 %, mostly copies inside the set; digits,
# garments, ORL and Yale portraits: 5.8 to 23 %), measured on at most CALIBRATION of them.
ALIKE = 0.8
ALIKE_LIMIT = 0.01
CALIBRATION = 500

_LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def thumbnails(images: np.ndarray, chunk: int = 16) -> np.ndarray:
    """``(n, THUMB, THUMB)`` float32 grey thumbnails of ``(n, h, w, c)`` images (uint8 or float, any range): luma
    for RGB, the mean of the channels otherwise, area-averaged (each thumbnail pixel the mean of the image area
    it covers, fractions of pixels included)."""
    x = np.asarray(images)
    if x.ndim == 3:
        x = x[..., None]
    n, h, w, c = x.shape
    weights = _LUMA if c == 3 else np.full(c, 1.0 / c, np.float32)
    # One product does the grey and the columns' average: rows of (w·c) values times (w·c, THUMB).
    cols = (_spans_matrix(np.zeros((1, 2)), w, THUMB)[0].T[:, None, :] * weights[None, :, None]).reshape(w * c, -1)
    rows = _spans_matrix(np.zeros((1, 2)), h, THUMB)[0]
    out = np.empty((n, THUMB, THUMB), np.float32)
    with one_thread():  # as the search (best_matches): the same bits on any machine
        for a in range(0, n, chunk):
            part = x[a : a + chunk].reshape(-1, h, w * c).astype(np.float32)
            out[a : a + chunk] = np.matmul(rows, part @ cols)
    return out


@by_content(kept=8)
def bar(public: np.ndarray) -> float | None:
    """The score from which a private image is a near copy of one of the ``public`` thumbnails: ``BAR``, or
    ``None`` when the public images are too alike to tell a near copy from a different image (see the module's
    docstring). Kept per public set for the process (a fit, the refits of its audit and a conformance run compare
    with the same set)."""
    result: float | None = BAR
    if len(public) > 1:
        sample = np.unique(np.linspace(0, len(public) - 1, min(len(public), CALIBRATION)).astype(np.int64))
        score, _ = best_matches(public, public[sample], exclude=sample, stop=ALIKE)
        if np.mean(score >= ALIKE) > ALIKE_LIMIT:
            result = None
    return result


def near_copies(public: np.ndarray, private: np.ndarray) -> np.ndarray | None:
    """Which ``private`` thumbnails are near copies of some ``public`` one (:func:`thumbnails` of both); ``None``
    when none is looked for (:func:`bar`)."""
    at = bar(public)
    if at is None:
        return None
    score, _ = best_matches(public, private, stop=at)
    return score >= at


def best_matches(public: np.ndarray, private: np.ndarray, *, exclude: np.ndarray | None = None,
                 stop: float = BAR) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """For each private thumbnail, its best whitened correlation with a crop of a public one (−1 when there is
    none), and which public one (−1). ``exclude``: per private image, a public index not to compare it with (the
    image itself, when the public set is compared with itself). The crop of a pair whose score on the grid lies
    between ``stop`` − ``REFINE_BELOW`` and ``stop`` is refined; a pair at ``stop`` or more already is not (its
    score is then a lower bound)."""
    # One BLAS thread: the search is many small products, which a second thread only slows (busy-waiting: the
    # calibration on 400 digits took 4.8 CPU-s with two threads, 0.5 with one), and the scores, hence what is
    # refused, are the same bits on any machine.
    with one_thread():
        return _best_matches(public, private, exclude, stop)


def _best_matches(public: np.ndarray, private: np.ndarray, exclude: np.ndarray | None,
                  stop: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    n_priv = len(private)
    score, which = np.full(n_priv, -1.0, np.float32), np.full(n_priv, -1, np.int64)
    if not n_priv or len(public) - (exclude is not None) < 1:
        return score, which
    cand = _candidates(public, private, exclude)  # (n_priv, k)
    full = _standard(_crops(np.concatenate([public, private]), SIDE, [(0.0, 0.0)])[:, 0])
    white = _Whitening(full)
    query = white.query(full[len(public) :])  # (n_priv, side²)
    offset = query @ white.mean  # (n_priv,): the mean's part of each dot product
    pair, crop = _on_grid(public, query, offset, white, cand)
    todo = np.nonzero((pair >= stop - REFINE_BELOW) & (pair < stop))
    if len(todo[0]):
        rows = todo[0]
        pair[todo] = _descend(public[cand[todo]], query[rows], offset[rows], white, crop[todo], pair[todo])
    top = pair.argmax(axis=1)
    at = np.arange(n_priv)
    return pair[at, top], cand[at, top]


def _on_grid(public: np.ndarray, query: np.ndarray, offset: np.ndarray, white: _Whitening,
             cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Each candidate pair's best score over the crops of ``CUTS`` and that crop (top, bottom, left, right)."""
    spans = list(itertools.product(CUTS, CUTS))
    grid = np.array([[*r, *c] for r in spans for c in spans], np.float64)  # (v, 4), in _crops' order
    pair = np.full(cand.shape, -1.0, np.float32)
    best = np.zeros(cand.shape, np.int64)
    # Pairs grouped by public image, so that each public image's crops are made once.
    flat = cand.ravel()
    order = np.argsort(flat, kind="stable")
    used, starts = np.unique(flat[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    for a in range(0, len(used), 256):
        crops = _standard(_crops(public[used[a : a + 256]], SIDE, spans))  # (m, v, side²)
        inv = 1.0 / white.norm(crops)  # (m, v)
        for j in range(len(crops)):
            at = order[starts[a + j] : ends[a + j]]
            rows = at // cand.shape[1]
            s = (query[rows] @ crops[j].T - offset[rows, None]) * inv[j]
            pair.flat[at] = s.max(axis=1)
            best.flat[at] = s.argmax(axis=1)
    return pair, grid[best]


def _descend(thumbs: np.ndarray, query: np.ndarray, offset: np.ndarray, white: _Whitening, crop: np.ndarray,
             score: np.ndarray, rounds: int = 4) -> np.ndarray:  # fmt: skip
    """The best scores of pairs (public ``thumbs``, private ``query``) from their crops ``crop`` (p, 4): each of
    ``STEPS`` in turn, move one cut by ± the step where that scores better, ``rounds`` times at most."""
    crop, score = crop.copy(), score.astype(np.float32).copy()
    moves = np.concatenate([np.eye(4), -np.eye(4)])  # (8, 4)
    for a in range(0, len(thumbs), 512):
        part = slice(a, a + 512)
        for step in STEPS:
            for _ in range(rounds):
                trial = np.clip(crop[part, None, :] + step * moves, 0.0, MAX_CUT)  # (p, 8, 4)
                p = len(trial)
                r = _spans_matrix(trial[..., :2].reshape(-1, 2), THUMB, SIDE).reshape(p, 8, SIDE, THUMB)
                c = _spans_matrix(trial[..., 2:].reshape(-1, 2), THUMB, SIDE).reshape(p, 8, SIDE, THUMB)
                v = np.matmul(np.matmul(r, thumbs[part, None]), c.transpose(0, 1, 3, 2)).reshape(p, 8, -1)
                v = _standard(v)
                s = (np.einsum("pvd,pd->pv", v, query[part]) - offset[part, None]) / white.norm(v)
                k = s.argmax(axis=1)
                better = s[np.arange(p), k] > score[part]
                if not better.any():
                    break
                idx = np.flatnonzero(better) + a
                score[idx] = s[better, k[better]]
                crop[idx] = trial[better, k[better]]
    return score


def _candidates(public: np.ndarray, private: np.ndarray, exclude: np.ndarray | None) -> np.ndarray:
    """``(n_private, k)``: the public images nearest each private one at ``PROBE``×``PROBE``, the whole private
    image against the ``PROBE_SPANS`` crops of each public one."""
    spans = list(itertools.product(PROBE_SPANS, PROBE_SPANS))
    pub = _standard(_crops(public, PROBE, [(0.0, 0.0)])[:, 0])
    priv = _standard(_crops(private, PROBE, [(0.0, 0.0)])[:, 0])
    white = _Whitening(np.concatenate([pub, priv]))
    crops = _standard(_crops(public, PROBE, list(PROBE_SPANS))).transpose(1, 0, 2)  # (v, n_pub, probe²)
    keys = ((crops - white.mean) / white.norm(crops)[..., None]).reshape(-1, PROBE * PROBE)
    query = white.query(priv)
    k = min(CANDIDATES, len(public) - (exclude is not None))
    out = np.empty((len(private), k), np.int64)
    step = max(1, min(512, (1 << 22) // len(keys)))  # at most 16 MB of scores at a time
    for a in range(0, len(private), step):
        s = (query[a : a + step] @ keys.T).reshape(-1, len(spans), len(public)).max(axis=1)
        at = np.arange(len(s))
        if exclude is not None:
            s[at, exclude[a : a + step]] = -np.inf
        for j in range(k):  # a few passes of argmax: faster than partitioning every row
            out[a : a + step, j] = best = s.argmax(axis=1)
            s[at, best] = -np.inf
    return out


def _spans_matrix(spans: np.ndarray, n: int, size: int) -> np.ndarray:
    """``(len(spans), size, n)``: for each span (cut at the start, cut at the end, fractions of ``n`` pixels), the
    area average of ``[cut₀, 1 − cut₁]`` to ``size`` pixels."""
    spans = np.asarray(spans, np.float64)
    t = np.arange(size + 1) / size
    edges = (spans[:, :1] + (1 - spans[:, :1] - spans[:, 1:]) * t) * n  # (s, size + 1)
    k = np.arange(n)
    lo, hi = edges[:, :-1, None], edges[:, 1:, None]
    cover = np.clip(np.minimum(hi, k + 1) - np.maximum(lo, k), 0, None)
    return (cover / cover.sum(axis=2, keepdims=True)).astype(np.float32)


def _crops(thumbs: np.ndarray, side: int, spans: list[tuple[float, float]]) -> np.ndarray:
    """``(n, len(spans)², side²)``: every thumbnail cropped to each (rows span, columns span) pair, resized to
    ``side``."""
    m = _spans_matrix(np.array(spans, np.float64).reshape(-1, 2), THUMB, side)  # (s, side, THUMB)
    rows = np.matmul(m[None], thumbs[:, None])  # (n, s, side, THUMB)
    # Laid out (n, rows span, columns span, side, side) as it is computed: no copy to reshape.
    out = np.matmul(rows[:, :, None], m.transpose(0, 2, 1)[None, None])
    return out.reshape(len(thumbs), len(spans) ** 2, side * side)


def _standard(d: np.ndarray) -> np.ndarray:
    """Mean 0 and norm 1 along the last axis (a flat descriptor stays 0)."""
    d = d - d.mean(axis=-1, keepdims=True)
    return d / np.maximum(np.linalg.norm(d, axis=-1, keepdims=True), 1e-6)


class _Whitening:
    """Whitened correlation of standardised descriptors, from the covariance of ``sample`` (descriptors of both
    sets, uncropped; at most 4,000 of them, evenly spaced) shrunk towards a generic image covariance: the ``TOP``
    leading directions scaled by 1/√(λ + floor), every other by 1/√floor.

    The shrinkage is for small sets: whitened by the covariance of a few dozen images, those very images lie in
    the directions it scales down, and what a copy adds (a re-encoding, a crop's misalignment) dominates what is
    left. ``PRIOR_WEIGHT`` images' worth of the covariance of pixels that correlate ``PRIOR_RHO`` ** distance
    (a smooth image's) keeps a copy of one of 60 faces above 0.95 (below 0.4 without), and changes little for
    thousands."""

    def __init__(self, sample: np.ndarray) -> None:
        sample = sample[:: max(1, len(sample) // 4000)]
        n, d = sample.shape
        self.mean = sample.mean(axis=0)
        prior = _prior(d)
        cov = np.cov(sample, rowvar=False) if n > 1 else np.zeros((d, d))
        if n > 1:
            prior = prior * (np.trace(cov) / np.trace(prior))
        cov = (n * cov + PRIOR_WEIGHT * prior) / (n + PRIOR_WEIGHT)
        lam, vec = np.linalg.eigh(cov)
        self.floor = max(RIDGE * float(lam.mean()), 1e-8)
        top = min(TOP, d)
        self.basis = vec[:, -top:].astype(np.float32)  # (d, top)
        # W² = I / floor + basis · diag(1 / (λ + floor) − 1 / floor) · basisᵀ
        self.extra = (1.0 / (np.maximum(lam[-top:], 0) + self.floor) - 1.0 / self.floor).astype(np.float32)

    def norm(self, d: np.ndarray) -> np.ndarray:
        """‖W (d − mean)‖ along the last axis."""
        c = d - self.mean
        sq = np.einsum("...i,...i->...", c, c) / self.floor + ((c @ self.basis) ** 2) @ self.extra
        return np.sqrt(np.maximum(sq, 1e-12))

    def query(self, d: np.ndarray) -> np.ndarray:
        """W² (d − mean) / ‖W (d − mean)‖: its dot product with (c − mean) / ‖W (c − mean)‖ is the whitened
        correlation of ``d`` and ``c``."""
        c = d - self.mean
        return (c / self.floor + ((c @ self.basis) * self.extra) @ self.basis.T) / self.norm(d)[..., None]


@functools.lru_cache(maxsize=4)
def _prior(d: int) -> np.ndarray:
    """The covariance of standardised ``side``×``side`` descriptors (d = side²) whose pixels correlate
    ``PRIOR_RHO`` ** their distance, the mean removed."""
    side = round(d**0.5)
    g = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1).reshape(-1, 2)
    cov = PRIOR_RHO ** np.sqrt(((g[:, None] - g[None]) ** 2).sum(-1))
    centre = np.eye(d) - 1.0 / d
    return centre @ cov @ centre
