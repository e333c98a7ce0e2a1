"""Privacy–utility trade-off curves and their convex-hull AUC (Jamshidi et al. 2023, §4.2.7)."""

from __future__ import annotations

import numpy as np
from scipy.spatial import ConvexHull, QhullError

from privpix.errors import ParameterError


def convex_hull_auc(
    leakage: np.ndarray,
    utility: np.ndarray,
    start: tuple[float, float] = (0.0, 0.0),
    end: tuple[float, float] | None = None,
) -> float:
    """Convex-hull area under a trade-off curve, as Jamshidi et al. 2023 compute it (after their reference [28]).

    Each point is (leakage, utility) = (adversary accuracy on the private attribute, utility-provider accuracy).
    The curve runs from ``start`` through the points to ``end`` = (maximum leakage, maximum utility), normally
    the two accuracies on the original data (default: the largest of the points); the area is that of the
    convex hull of ``start``, the points, ``end`` and ``(end[0], start[1])``. Lower leakage at equal utility
    gives a larger area. ``start = (0, 0)`` follows [24] and the paper's Table 3; ``(0.5, 0.5)``, chance for
    a balanced binary attribute, is the origin the paper calls logical. Both are reported by the benchmarks.
    """
    x = np.asarray(leakage, dtype=np.float64).ravel()
    y = np.asarray(utility, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ParameterError("leakage and utility must be non-empty arrays of the same length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ParameterError("leakage and utility must be finite")
    ex, ey = (float(x.max()), float(y.max())) if end is None else end
    sx, sy = start
    if ex <= sx or ey <= sy:
        raise ParameterError(f"end {(ex, ey)} must lie above and to the right of start {(sx, sy)}")
    pts = np.concatenate([[[sx, sy]], np.c_[np.clip(x, sx, ex), np.clip(y, sy, ey)], [[ex, ey], [ex, sy]]])
    try:
        return float(ConvexHull(pts).volume)  # in 2-D, "volume" is the area
    except QhullError:
        return 0.0  # degenerate: every point on one line
