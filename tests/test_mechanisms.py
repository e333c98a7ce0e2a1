import numpy as np
import pytest
from scipy import stats

from privpix.data import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms import MECHANISMS, get_mechanism, parse_method_spec


def _images(n=4, h=12, w=10, c=1, seed=0):
    rng = np.random.default_rng(seed)
    return ImageSet(rng.integers(0, 256, (n, h, w, c), dtype=np.uint8), labels=np.arange(n) % 2)


def test_registry_lists_every_foundation_mechanism():
    assert {"pixel-laplace", "dp-pix", "pixel-gaussian", "gaussian-blur", "median-filter", "uniform-filter"} <= set(
        MECHANISMS
    )
    for cls in MECHANISMS.values():
        assert cls.summary and cls.about.guarantee_model in ("central-dp", "local-dp", "empirical", "none")


def test_lap_data_sensitivity_is_the_papers_column_norm_and_scale_is_right():
    big = ImageSet(np.full((1, 40, 30, 1), 128, np.uint8))
    mech = get_mechanism("pixel-laplace", epsilon=2.0, clip=False)
    x = big.as_float()[0]
    delta = np.abs(x).sum(axis=0).max()  # largest column L1 norm
    assert mech.data_sensitivity(big.as_float().astype(float))[0] == pytest.approx(delta)
    residual = (mech.release(big, 1).images.images[0] - x).ravel()
    assert stats.kstest(residual, stats.laplace(scale=delta / 2.0).cdf).pvalue > 1e-3


def test_lap_data_sensitivity_releases_black_image_unchanged_and_says_unsound():
    black = ImageSet(np.zeros((1, 8, 8, 1), np.uint8))
    rel = get_mechanism("pixel-laplace", epsilon=0.01).release(black, 0)
    assert np.array_equal(rel.images.images, black.as_float())  # the flaw the caveat names
    g = rel.guarantee
    assert not g.sound and g.per_image_epsilon is None
    assert any("all-black image" in c for c in g.caveats)


@pytest.mark.parametrize(
    "unit,m,per_image", [("column", 1, 0.5 * 10), ("pixel", 1, 0.5 * 120), ("pixels", 4, 0.5 * 30), ("image", 1, 0.5)]
)
def test_lap_bound_guarantee_per_unit(unit, m, per_image):
    mech = get_mechanism("pixel-laplace", epsilon=0.5, sensitivity="bound", unit=unit, m=m)
    g = mech.privacy((12, 10, 1)).guarantee
    assert g.sound and g.epsilon == 0.5
    assert g.per_image_epsilon == pytest.approx(per_image)


def test_lap_bound_noise_scale_matches_sensitivity():
    imgs = ImageSet(np.full((50, 12, 10, 1), 100, np.uint8))
    mech = get_mechanism("pixel-laplace", epsilon=4.0, sensitivity="bound", unit="pixel", clip=False)
    res = (mech.release(imgs, 3).images.images - imgs.as_float()).ravel()
    assert stats.kstest(res, stats.laplace(scale=1 / 4.0).cdf).pvalue > 1e-3


def test_lap_data_needs_column_unit():
    with pytest.raises(ParameterError, match="unit=column"):
        get_mechanism("pixel-laplace", epsilon=1.0, unit="pixel")


def test_dp_pix_cells_and_noise():
    imgs = _images(n=200, h=8, w=8)
    mech = get_mechanism("dp-pix", epsilon=1.0, b=4, m=2, clip=False)
    out = mech.release(imgs, 5).images.images
    # Each 4x4 cell is constant in the release.
    cells = out.reshape(200, 2, 4, 2, 4, 1)
    assert np.allclose(cells, cells[:, :, :1, :, :1, :])
    means = imgs.as_float().reshape(200, 2, 4, 2, 4, 1).mean(axis=(2, 4))
    res = (cells[:, :, 0, :, 0, :] - means).ravel()
    assert stats.kstest(res, stats.laplace(scale=2 / 16).cdf).pvalue > 1e-3
    g = mech.privacy((8, 8, 1)).guarantee
    assert g.sound and g.per_image_epsilon == pytest.approx(1.0 * 4 / (2 / 16))


def test_dp_pix_border_cells_use_the_smallest_cell():
    mech = get_mechanism("dp-pix", epsilon=1.0, b=4)
    assert mech._cells(10, 10) == (3, 3, 4)  # border cell is 2x2
    out = mech.release(_images(h=10, w=10), 0).images.images
    assert out.shape == (4, 10, 10, 1)


@pytest.mark.parametrize("name", ["gaussian-blur", "median-filter", "uniform-filter"])
def test_filters_are_deterministic_and_claim_nothing(name):
    imgs = _images(c=3)
    a = get_mechanism(name).release(imgs, 0)
    b = get_mechanism(name).release(imgs, 99)
    assert np.array_equal(a.images.images, b.images.images)
    assert a.guarantee.model == "none" and not a.guarantee.sound
    assert a.images.images.shape == imgs.images.shape


def test_pixel_gaussian_std():
    imgs = ImageSet(np.full((20, 16, 16, 1), 128, np.uint8))
    out = get_mechanism("pixel-gaussian", sigma=0.05, clip=False).release(imgs, 0).images.images
    res = (out - imgs.as_float()).ravel()
    assert stats.kstest(res, stats.norm(scale=0.05).cdf).pvalue > 1e-3


def test_same_seed_same_release_and_secure_mode_works():
    imgs = _images()
    m = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound")
    assert np.array_equal(m.release(imgs, 11).images.images, m.release(imgs, 11).images.images)
    from privpix.privacy.noise import make_rng

    out = m.release(imgs, make_rng(secure=True)).images.images
    assert out.shape == imgs.images.shape and np.all((out >= 0) & (out <= 1))


@pytest.mark.parametrize("b", [4, 8, 16, 64])
def test_secure_dp_pix_counts_the_snapping_of_its_cell_means_to_the_lattice(b, monkeypatch):
    """In secure mode a cell mean is snapped to the lattice before its exact noise, so what the noise must cover is
    the distance between two neighbours' snapped means. Every 8-bit cell of b×b pixels against the same cell with
    one pixel moved by the whole range (exhaustive over the cell's sums): the largest such distance is within the
    sensitivity the secure noise is calibrated to. For b = 16 and 64 the snapping adds a step (64 steps against the
    63.75 of the mean's own move at b = 16); the continuous-noise calibration, without it, does not cover them."""
    from privpix.privacy.noise import PIXEL_GRID

    mech = get_mechanism("dp-pix", epsilon=1.0, b=b)
    k = b * b
    sums = np.arange(0, 255 * k - 255 + 1)  # the cell's sum of 8-bit levels, leaving room for one pixel's +255
    before, after = np.round(sums / (255 * k) / PIXEL_GRID), np.round((sums + 255) / (255 * k) / PIXEL_GRID)
    moved = float(np.max(np.abs(after - before))) * PIXEL_GRID
    assert moved <= mech._scale(1, 1, k, secure=True) * mech.epsilon
    assert (moved <= mech._scale(1, 1, k, secure=False) * mech.epsilon) == (64 % k == 0)
    # A secure release draws its noise at that scale (three channels: three means move), a seeded one at Δ/ε.
    from privpix.mechanisms import pixel
    from privpix.privacy.noise import make_rng

    imgs = ImageSet(np.random.default_rng(0).integers(0, 256, (2, b, b, 3), dtype=np.uint8))
    scales = []
    real = pixel.add_laplace
    monkeypatch.setattr(pixel, "add_laplace", lambda v, s, rng: scales.append(s) or real(v, s, rng))
    assert mech.release(imgs, make_rng(secure=True)).images.images.shape == imgs.images.shape
    mech.release(imgs, 0)
    assert scales == [mech._scale(3, 1, k, secure=True), 3 / k]
    secure = mech.privacy(imgs.shape, secure=True)
    assert (
        secure.unit_events[0].kind == "pure"
        and "plus 3 step(s) of the exact sampler's lattice" in secure.guarantee.caveats[0]
    )
    assert "lattice" not in mech.privacy(imgs.shape).guarantee.caveats[0]


def test_secure_dp_pix_covers_float_cells_between_lattice_points(monkeypatch):
    """Float images put a cell mean anywhere between lattice points. 20,001 grey 4×4 cells whose other 15 pixels
    hold r from 0 to 1, the first pixel 0 in one image and 1 in its neighbour, through the mechanism's own means:
    their snapped means move up to one lattice step more than the means (1,021 steps against 1,020 at b = 4, where
    8-bit images never do), which the secure sensitivity covers and the continuous one does not."""
    from privpix.mechanisms import pixel
    from privpix.privacy.noise import PIXEL_GRID, make_rng

    snapped = []
    monkeypatch.setattr(pixel, "add_laplace", lambda v, s, rng: snapped.append(np.round(v / PIXEL_GRID)) or v)
    mech = get_mechanism("dp-pix", epsilon=1.0, b=4, clip=False)
    r = np.linspace(0.0, 1.0, 20_001)
    x = np.repeat(r, 16).reshape(-1, 4, 4, 1)
    y = x.copy()
    x[:, 0, 0, 0], y[:, 0, 0, 0] = 0.0, 1.0
    mech._privatize(x, make_rng(secure=True))
    mech._privatize(y, make_rng(secure=True))
    moved = float(np.abs(snapped[1] - snapped[0]).max()) * PIXEL_GRID
    assert (
        mech._scale(1, 1, 16, secure=False) * mech.epsilon < moved <= mech._scale(1, 1, 16, secure=True) * mech.epsilon
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(name="pixel-laplace"), "epsilon is required"),
        (dict(name="pixel-laplace", epsilon=-1), "epsilon must be > 0"),
        (dict(name="pixel-laplace", epsilon=1, sensitivity="global"), "sensitivity must be one of"),
        (dict(name="dp-pix", epsilon=1, b=0), "b must be >= 1"),
        (dict(name="dp-pix", epsilon=1, bogus=3), "unknown parameter"),
        (dict(name="gaussian-blur", epsilon=1), "takes no epsilon"),
        (dict(name="nope"), "unknown mechanism"),
    ],
)
def test_parameter_errors_name_the_parameter(kwargs, match):
    name = kwargs.pop("name")
    with pytest.raises(ParameterError, match=match):
        get_mechanism(name, **kwargs)


def test_method_spec_with_inline_parameters():
    assert parse_method_spec("dp-pix[b=2, m=3]") == ("dp-pix", {"b": "2", "m": "3"})
    m = get_mechanism("pixel-laplace[sensitivity=bound,unit=image]", epsilon=1.0)
    assert m.sensitivity == "bound" and m.unit == "image"
    with pytest.raises(ParameterError):
        parse_method_spec("dp-pix[b2]")


def test_ldp_pixel_is_grr_on_quantised_pixels():
    import math

    x = np.full((200, 10, 10, 1), 0.3, np.float32)  # level 1 of 4 ([0.25, 0.5))
    rel = get_mechanism("ldp-pixel[levels=4]", epsilon=1.0).release(ImageSet(images=x), 0)
    out = rel.images.as_float()
    assert set(np.unique(out)) <= {0.125, 0.375, 0.625, 0.875}  # bin centres only
    keep = np.mean(out == 0.375)
    p = math.e / (math.e + 3)
    assert abs(keep - p) < 4 * math.sqrt(p * (1 - p) / out.size)
    g = rel.guarantee
    assert g.model == "local-dp" and g.sound and g.per_feature_epsilon == 1.0 and g.per_image_epsilon == 100.0


def test_ldp_pixel_claims_for_a_colour_pixel_the_epsilon_of_its_channels():
    """A pixel (the unit, all its channels) of an RGB image is three randomized responses: the most its three
    reported levels can shift between two inputs is the product of three ε-ratios, e^(3ε), which is what the claim
    must state (exact output probabilities of GRR, eq. 3, not a sample)."""
    import math

    from privpix.privacy.composition import PureDP
    from privpix.privacy.grr import grr_probabilities

    mech = get_mechanism("ldp-pixel[levels=4]", epsilon=1.0)
    p, q = grr_probabilities(4, 1.0)
    # Every channel reported as its old level: kept under one input, replaced under the other.
    worst = 3 * math.log(p / q)
    for shape, channels in (((8, 8, 3), 3), ((8, 8, 1), 1)):
        claim = mech.privacy(shape)
        assert claim.epsilon == pytest.approx(worst * channels / 3)
        assert claim.unit_events == (PureDP(1.0, count=channels),)
        assert claim.guarantee.per_feature_epsilon == 1.0 and claim.guarantee.per_image_epsilon == 64 * channels
