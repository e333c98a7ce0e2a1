import numpy as np
import pytest

from privpix.errors import ParameterError
from privpix.evaluation.tradeoff import convex_hull_auc


def test_convex_hull_auc_known_areas():
    # One point above the diagonal: the triangle under the diagonal plus the one the point adds.
    assert convex_hull_auc([0.5], [0.8], end=(1, 1)) == pytest.approx(0.5 + 0.15)
    # Less leakage at the same utility is better.
    assert convex_hull_auc([0.3], [0.8], end=(1, 1)) == pytest.approx(0.5 + 0.25)
    # A point inside the hull adds nothing.
    base = convex_hull_auc([0.3, 0.6], [0.8, 0.95], end=(1, 1))
    assert convex_hull_auc([0.3, 0.6, 0.5], [0.8, 0.95, 0.7], end=(1, 1)) == pytest.approx(base)
    # The chance origin the paper calls logical.
    assert convex_hull_auc([0.6], [0.9], start=(0.5, 0.5), end=(1, 1)) == pytest.approx(0.125 + 0.075)
    # Default end: the largest leakage and utility among the points.
    assert convex_hull_auc([0.5, 1.0], [0.8, 1.0]) == pytest.approx(0.65)
    with pytest.raises(ParameterError, match="same length"):
        convex_hull_auc([0.1, 0.2], [0.3])
    with pytest.raises(ParameterError, match="above and to the right"):
        convex_hull_auc([0.4], [0.9], start=(0.5, 0.5))
    assert convex_hull_auc(np.array([0.5, 1.0]), np.array([0.5, 1.0])) == pytest.approx(0.5)
