import numpy as np
import pytest

from privpix.errors import ParameterError
from privpix.evaluation.linkage import frechet_distance, reidentification_rate


def test_reidentification_rate():
    rng = np.random.default_rng(0)
    x = rng.random((200, 8, 8))
    assert reidentification_rate(x, x) == 1.0
    assert reidentification_rate(x + rng.normal(0, 0.01, x.shape), x) == 1.0
    # Released images that carry nothing of their source are matched at about chance (1/200).
    assert reidentification_rate(rng.random((200, 8, 8)), x) < 0.03
    with pytest.raises(ParameterError, match="pair up"):
        reidentification_rate(x[:5], x)


def test_frechet_distance_closed_form():
    rng = np.random.default_rng(1)
    a = rng.normal(0, 1, (200_000, 1))
    b = rng.normal(3, 2, (200_000, 1))
    # 1-D: (μa − μb)² + (σa − σb)² = 9 + 1.
    assert frechet_distance(a, b) == pytest.approx(10.0, rel=0.01)
    c = rng.normal(0, 1, (5000, 4))
    assert frechet_distance(c, c) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ParameterError, match="same k"):
        frechet_distance(c, c[:, :3])
