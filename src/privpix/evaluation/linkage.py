"""Linking released images back to their sources, and comparing feature distributions.

* :func:`reidentification_rate`: the attacker holds all the originals and matches each released image to its
  nearest original (Euclidean, in pixel space or in any feature space); the rate is the fraction matched to
  their own source. Chance is 1/n.
* :func:`frechet_distance`: the Fréchet distance between Gaussians fitted to two feature sets (the formula of
  FID, here on the features of a classifier we train ourselves, so it is *not* comparable to published FIDs).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from sklearn.neighbors import NearestNeighbors

from privpix.errors import ParameterError


def reidentification_rate(released: np.ndarray, originals: np.ndarray) -> float:
    """Fraction of ``released[i]`` whose nearest row of ``originals`` is ``originals[i]``.

    Both are ``(n, ...)`` arrays in the same order (flattened per row); pass features to attack in a feature
    space. Ties count as misses only if another original is strictly nearer.
    """
    a = np.asarray(released, dtype=np.float32).reshape(len(released), -1)
    b = np.asarray(originals, dtype=np.float32).reshape(len(originals), -1)
    if a.shape != b.shape:
        raise ParameterError(f"released {a.shape} and originals {b.shape} must pair up row by row")
    _, idx = NearestNeighbors(n_neighbors=1, algorithm="brute").fit(b).kneighbors(a)
    return float(np.mean(idx[:, 0] == np.arange(len(a))))


def frechet_distance(feat_a: np.ndarray, feat_b: np.ndarray) -> float:
    """‖μ_a − μ_b‖² + tr(Σ_a + Σ_b − 2 (Σ_a Σ_b)^½) for (n, k) feature arrays."""
    a, b = np.asarray(feat_a, np.float64), np.asarray(feat_b, np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or min(len(a), len(b)) < 2:
        raise ParameterError("feature arrays must be (n, k) with the same k and n >= 2")
    mu_a, mu_b = a.mean(0), b.mean(0)
    ca, cb = np.atleast_2d(np.cov(a, rowvar=False)), np.atleast_2d(np.cov(b, rowvar=False))
    covmean = np.real(linalg.sqrtm(ca @ cb))
    return float(np.sum((mu_a - mu_b) ** 2) + np.trace(ca + cb - 2 * covmean))
