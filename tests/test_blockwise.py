"""Every per-image mechanism that takes any image size releases a large image block by block, in
memory bounded by a few copies of its decoded size, with the output of the whole-image computation bit for bit."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from privpix.data import ImageSet, imageset
from privpix.mechanisms import get_mechanism

# (spec, ε): the filters with windows of both parities, a blur whose kernel reaches past a small block, DP-Pix with
# cells that do not divide the image, and the per-value noises.
CASES = [
    ("gaussian-blur[sigma=1.3]", None),
    ("gaussian-blur[sigma=6]", None),
    ("median-filter[size=4]", None),
    ("median-filter[size=5]", None),
    ("uniform-filter[size=2]", None),
    ("uniform-filter[size=5]", None),
    ("dp-pix[b=3]", 2.0),
    ("dp-pix[b=4,m=2]", 2.0),
    ("dp-pix[b=4,m=2000,clip=false]", 2.0),  # m above a block's pixel count: the noise is the whole image's
    ("ldp-pixel", 3.0),
    ("pixel-gaussian[sigma=0.2]", None),
    ("pixel-laplace[sensitivity=bound,unit=pixel]", 1.0),
]


def _photo(h: int, w: int, n: int = 1, seed: int = 0) -> ImageSet:
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 200, w)[None, None, :, None] + np.linspace(0, 50, h)[None, :, None, None]
    x = np.clip(ramp + rng.normal(0, 20, (n, h, w, 3)), 0, 255).astype(np.uint8)
    return ImageSet(images=x, names=np.array([f"p{i}.png" for i in range(n)]))


@pytest.mark.parametrize(("spec", "epsilon"), CASES)
def test_a_large_image_in_row_blocks_is_the_whole_image_computation(spec, epsilon, monkeypatch):
    images = _photo(61, 47)
    mech = get_mechanism(spec, epsilon)
    whole = np.asarray(mech._privatize(images.as_float().astype(np.float64), np.random.default_rng(5)), np.float32)
    # 47·3 values a row: blocks of 7 rows (dp-pix: whole cell rows), so a 61-row image is cut 9 times.
    monkeypatch.setattr(imageset, "BLOCK_VALUES", 7 * 47 * 3)
    got = mech.release(images, np.random.default_rng(5)).images.images
    np.testing.assert_array_equal(got, whole)


@pytest.mark.parametrize(("spec", "epsilon"), CASES)
def test_small_images_in_groups_are_the_whole_set_computation(spec, epsilon, monkeypatch):
    images = _photo(9, 11, n=7, seed=1)
    mech = get_mechanism(spec, epsilon)
    whole = np.asarray(mech._privatize(images.as_float().astype(np.float64), np.random.default_rng(6)), np.float32)
    monkeypatch.setattr(imageset, "BLOCK_VALUES", 2 * 9 * 11 * 3)  # two images per block, a ragged last one
    got = mech.release(images, np.random.default_rng(6)).images.images
    np.testing.assert_array_equal(got, whole)


@pytest.mark.parametrize(("spec", "epsilon"), CASES)
def test_peak_memory_is_a_few_copies_of_the_image(spec, epsilon, monkeypatch):
    """numpy's allocations while one 600×600 RGB photo (1.08 MB decoded) is released, blocks of 16k values: the
    float32 output is 4 copies and the blocks add little: at most 6.3× when measured, where the blocks are tiny
    beside σ = 6's reach of 24 rows. The whole-image path held float64 copies: 24× to 38× in this test."""
    images = _photo(600, 600)
    decoded = images.images.nbytes
    mech = get_mechanism(spec, epsilon)
    monkeypatch.setattr(imageset, "BLOCK_VALUES", 1 << 14)
    mech.release(images, np.random.default_rng(0))  # imports and caches outside the measurement
    tracemalloc.start()
    try:
        mech.release(images, np.random.default_rng(0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 6.5 * decoded, f"{spec}: peak {peak / decoded:.1f}× the decoded image"
