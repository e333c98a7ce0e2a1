"""The Fréchet distance: its formula on known Gaussians, and its ordering on real faces."""

from __future__ import annotations

import numpy as np
import pytest

from privpix.data import ImageSet, load_dataset
from privpix.errors import ParameterError
from privpix.evaluation.frechet import frechet_distance, frechet_from_features, scattering_features


def test_the_formula_on_gaussians_of_known_moments():
    """N(μ_a, I) against N(μ_b, 4I) in 5 dimensions: d² = ‖μ_a − μ_b‖² + 5·(1 + 4 − 2·2) = 4 + 5, from 200,000
    samples each (seeded) to within 2 %; zero against itself; symmetric."""
    rng = np.random.default_rng(0)
    a = rng.normal(0, 1, (200_000, 5))
    b = rng.normal(0, 2, (200_000, 5))
    b[:, 0] += 2.0
    assert frechet_from_features(a, b) == pytest.approx(9.0, rel=0.02)
    assert frechet_from_features(a, b) == pytest.approx(frechet_from_features(b, a), rel=1e-6)
    assert frechet_from_features(a, a) == pytest.approx(0.0, abs=1e-6)


def test_bad_input_is_refused():
    with pytest.raises(ParameterError, match="same k"):
        frechet_from_features(np.zeros((3, 2)), np.zeros((3, 4)))
    with pytest.raises(ParameterError, match="n >= 2"):
        frechet_from_features(np.zeros((1, 2)), np.zeros((3, 2)))
    digits = load_dataset("builtin-mnist").subset(np.arange(4))
    with pytest.raises(ParameterError, match="same shape"):
        frechet_distance(digits, digits.resized(16, 16))


def test_features_are_17_maps_per_channel_by_quadrant():
    images = ImageSet(np.random.default_rng(1).integers(0, 256, (3, 32, 32, 3)).astype(np.uint8))
    f = scattering_features(images)
    assert f.shape == (3, 204)
    # Order 0 of a channel in a quadrant is its blurred mean there: about the quadrant's mean intensity.
    top_left = 255 * images.as_float()[:, :16, :16, 0].mean(axis=(1, 2))
    assert np.allclose(f[:, 0], top_left, atol=8)
    with pytest.raises(ParameterError, match="at least 8x8"):
        scattering_features(ImageSet(np.zeros((2, 4, 4, 1), np.uint8)))


@pytest.mark.slow
def test_real_faces_are_closer_to_real_faces_than_to_noise_or_blur(data_dir):
    """Two halves of CelebA's test split (the same distribution, different people) are far closer than either is
    to random pixels or to blurred faces: the distance sees structure, not only brightness."""
    from scipy.ndimage import gaussian_filter

    faces = load_dataset("celeba:test", data_dir, size=(32, 32))
    train, test = faces.subset(np.arange(0, 800, 2)), faces.subset(np.arange(1, 800, 2))
    noise = ImageSet(np.random.default_rng(2).integers(0, 256, (400, 32, 32, 3)).astype(np.uint8))
    blurred = ImageSet(gaussian_filter(test.as_uint8(), sigma=(0, 2, 2, 0)))
    # The features are most of the cost: each set's are computed once (frechet_distance would compute the 400
    # training faces' three times). frechet_distance is that composition, checked exactly on a few faces.
    few_a, few_b = train.subset(np.arange(8)), test.subset(np.arange(8))
    assert frechet_distance(few_a, few_b) == frechet_from_features(
        scattering_features(few_a), scattering_features(few_b)
    )
    reference = scattering_features(train)
    same = frechet_from_features(reference, scattering_features(test))
    assert same < frechet_from_features(scattering_features(blurred), reference) / 2
    assert same < frechet_from_features(scattering_features(noise), reference) / 10
