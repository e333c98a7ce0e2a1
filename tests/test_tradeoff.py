import numpy as np
import pytest

from privpix.errors import ParameterError
from privpix.evaluation.tradeoff import convex_hull_auc


def test_convex_hull_auc_known_areas():
    assert convex_hull_auc([0.5], [0.8]) == pytest.approx(0.4)  # one point: a rectangle
    # Two points: the hull of two rectangles plus the segment joining their corners.
    assert convex_hull_auc([0.2, 0.6], [0.9, 0.3]) == pytest.approx(0.2 * 0.9 + 0.4 * 0.3 + 0.5 * 0.4 * 0.6)
    # A point inside the hull adds nothing; a different origin shrinks the area.
    assert convex_hull_auc([0.2, 0.6, 0.3], [0.9, 0.3, 0.5]) == pytest.approx(convex_hull_auc([0.2, 0.6], [0.9, 0.3]))
    assert convex_hull_auc([0.8], [0.9], origin=(0.5, 0.5)) == pytest.approx(0.3 * 0.4)
    assert convex_hull_auc([0.4], [0.9], origin=(0.5, 0.5)) == 0.0  # below chance privacy: no area
    with pytest.raises(ParameterError, match="same length"):
        convex_hull_auc([0.1, 0.2], [0.3])
    assert convex_hull_auc(np.array([0.1, 0.1]), np.array([0.0, 0.0])) == 0.0
