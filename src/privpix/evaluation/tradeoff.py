"""Privacy–utility trade-off curves and their convex-hull AUC (paper 003, §4.2.7)."""

from __future__ import annotations

import numpy as np
from scipy.spatial import ConvexHull, QhullError

from privpix.errors import ParameterError


def convex_hull_auc(privacy: np.ndarray, utility: np.ndarray, origin: tuple[float, float] = (0.0, 0.0)) -> float:
    """Area dominated by the convex hull of a trade-off curve.

    Each point is (privacy, utility), both "higher is better", e.g. privacy = 1 − adversary accuracy and
    utility = utility-provider accuracy. The area is that of the convex hull of the points, the origin and
    the points' projections on the two axes through the origin (so a single point (x, y) gives the rectangle
    (x − x0)(y − y0)). Points below the origin in either coordinate are clipped to it. Paper 003 (after
    [24]) uses the origin (0, 0); for binary features (0.5, 0.5), the accuracy of chance, is the more logical
    origin; both are reported by the benchmarks.
    """
    x = np.asarray(privacy, dtype=np.float64).ravel()
    y = np.asarray(utility, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ParameterError("privacy and utility must be non-empty arrays of the same length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ParameterError("privacy and utility must be finite")
    x0, y0 = origin
    x, y = np.maximum(x, x0), np.maximum(y, y0)
    pts = np.concatenate([np.c_[x, y], np.c_[x, np.full_like(y, y0)], np.c_[np.full_like(x, x0), y], [[x0, y0]]])
    try:
        return float(ConvexHull(pts).volume)  # in 2-D, "volume" is the area
    except QhullError:
        return 0.0  # degenerate: all points on a line through the origin
