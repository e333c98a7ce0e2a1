"""dp-hp: Hermite features of the Mehler kernel (the kernel they claim, their norm bound for
any pixels), the embedding's sensitivity, the calibration and the noise added (float and secure modes), the
guarantee, seeds, the model file, ``n``, and an end-to-end fit on 500 digits."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from privpix.data import ImageSet
from privpix.errors import DataError, ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.synthesis import dp_hp, embed_net, hermite, merf_net
from privpix.privacy import gaussian_release
from privpix.privacy.neighbours import OneOfBatch

TINY = {"order": 4, "epochs": 1, "batch_size": 20, "width": 16, "channels": 4}
torch = merf_net.torch


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def fitted(sixty):
    return get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)


def featurize(mech: dp_hp.DPHP, d: int = 784):
    """The fitted mechanism's φ (numpy in, numpy out) and D, rebuilt from its seed as a data user would."""
    meta = mech.meta_
    sets, omega = dp_hp.draw_structure(d, mech.prod_sets, mech.prod_dims, mech.rff_features, mech.rff_length_scale,
                                       meta["feature_seed"])  # fmt: skip
    w = dp_hp.shares(mech.prod_sets, mech.prod_share, mech.rff_features, mech.rff_share)
    return dp_hp.featurizer(mech.rho, mech.order, sets, mech.prod_order, omega, w), dp_hp.DPHP._feature_width(meta)


def norms(phi) -> np.ndarray:
    return np.linalg.norm(phi.detach().double().numpy(), axis=1)


# ------------------------------------------------------------------------------------------ the kernel


@pytest.mark.parametrize("length_scale", [0.05, 0.2, 0.4, 1.0, 3.0])
def test_rho_gives_the_gaussian_kernel_of_the_length_scale(length_scale):
    rho = hermite.rho_of(length_scale)
    assert 0 < rho < 1 and rho / (1 - rho * rho) == pytest.approx(1 / (2 * length_scale**2), rel=1e-12)
    x, y = np.linspace(-1, 2, 13), np.linspace(0, 1, 13)[:, None]
    np.testing.assert_allclose(hermite.mehler_kernel(x, y, rho), np.exp(-((x - y) ** 2) / (2 * length_scale**2)),
                               rtol=1e-9)  # fmt: skip


@pytest.mark.parametrize(("length_scale", "order"), [(0.4, 150), (1.0, 40), (3.0, 25)])
def test_features_of_high_order_reproduce_the_closed_form_mehler_kernel(length_scale, order):
    """⟨ψ(x), ψ(y)⟩ = exp(−ρ(x − y)²/(1 − ρ²)) once the tail Σ_{c>C} λ_c is negligible (ρ^(C+1) < 1e-9 here)."""
    rho = hermite.rho_of(length_scale)
    assert rho ** (order + 1) < 1e-9
    x = np.linspace(-0.5, 1.5, 21)
    psi = hermite.hermite_numpy(x, rho, order)
    np.testing.assert_allclose(psi @ psi.T, hermite.mehler_kernel(x[:, None], x[None], rho), atol=1e-9)
    # torch (float64) computes the same recurrence
    np.testing.assert_allclose(hermite.hermite_torch(torch.from_numpy(x), rho, order).numpy(), psi, atol=1e-12)


@pytest.mark.parametrize(("length_scale", "order"), [(0.0707, 100), (0.2, 20), (0.2, 5), (1.0, 2)])
def test_truncated_features_are_within_the_cauchy_schwarz_tail_bound(length_scale, order):
    """|k(x, y) − k_C(x, y)| = |Σ_{c>C} ψ_c(x)ψ_c(y)| ≤ sqrt(t(x)·t(y)) with t(x) = 1 − ‖ψ_{0..C}(x)‖², the part of
    k(x, x) = 1 the order leaves out: the truncation error bound of the order used. Also: k_C is the truncation
    of the expansion, so the features of order C are a prefix of those of a higher order."""
    rho = hermite.rho_of(length_scale)
    x = np.linspace(0, 1, 26)
    psi = hermite.hermite_numpy(x, rho, order)
    tail = 1 - (psi**2).sum(1)
    assert np.all(tail >= -1e-12)
    err = np.abs(hermite.mehler_kernel(x[:, None], x[None], rho) - psi @ psi.T)
    assert np.all(err <= np.sqrt(np.outer(tail, tail)) + 1e-9)
    np.testing.assert_allclose(hermite.hermite_numpy(x, rho, order + 30)[:, : order + 1], psi, atol=1e-13)


def test_sum_and_product_kernels_are_the_inner_products_of_their_features():
    rng = np.random.default_rng(0)
    rho, order = hermite.rho_of(1.0), 40
    x, y = rng.random((3, 12)), rng.random((4, 12))
    fx = hermite.sum_features(torch.from_numpy(x), rho, order).numpy()
    fy = hermite.sum_features(torch.from_numpy(y), rho, order).numpy()
    k_sum = hermite.mehler_kernel(x[:, None, :], y[None, :, :], rho).mean(axis=2)
    np.testing.assert_allclose(fx @ fy.T, k_sum, atol=1e-9)
    sets = np.array([[0, 5], [3, 7], [11, 2]])
    px = hermite.product_features(torch.from_numpy(x), sets, rho, order).numpy()
    py = hermite.product_features(torch.from_numpy(y), sets, rho, order).numpy()
    k = hermite.mehler_kernel(x[:, None, :], y[None, :, :], rho)
    k_prod = np.mean([k[:, :, s].prod(axis=2) for s in sets], axis=0)
    np.testing.assert_allclose(px @ py.T, k_prod, atol=1e-9)


# ------------------------------------------------------------------------------------------ the norm bound


@settings(max_examples=40, deadline=None)
@given(
    x=arrays(np.float32, (4, 10), elements=st.floats(-1e4, 1e4, width=32)),
    order=st.integers(1, 60),
    length_scale=st.floats(1e-3, 1e2),
    prod=st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(1, 6), st.floats(0.0, 0.5)),
    rff=st.tuples(st.integers(0, 4).map(lambda k: 2 * k), st.floats(0.0, 0.45)),
)
def test_every_row_has_norm_at_most_one_whatever_the_pixels(x, order, length_scale, prod, rff):
    """Any float32 pixel values (not only [0, 1]), any order, length, product sets and shares: ‖φ(x)‖ ≤ 1. Without
    the final projection too: the bound comes from the construction (the float32 recurrence rounds within 1e-5)."""
    (sets_n, dims, p_order, p_share), (d_rff, r_share) = prod, rff
    rho = hermite.rho_of(length_scale)
    xt = torch.from_numpy(x)
    assert norms(hermite.sum_features(xt, rho, order)).max() <= 1 + 1e-5
    sets, omega = dp_hp.draw_structure(10, sets_n, dims, d_rff, 0.0, seed=1)
    if sets_n:
        assert norms(hermite.product_features(xt, sets, rho, p_order)).max() <= 1 + 1e-5
    w = dp_hp.shares(sets_n, p_share, d_rff, r_share)
    phi = dp_hp.featurizer(rho, order, sets, p_order, omega, w)(xt)
    assert phi.shape == (4, dp_hp.feature_width(10, order, sets_n, dims, p_order, d_rff))
    assert np.all(np.isfinite(phi.numpy())) and norms(phi).max() <= 1 + 1e-6


def test_adversarial_images_get_close_to_the_bound_and_never_above():
    """The images that maximise the truncated norm: every pixel at the value where Σ_c ψ_c(t)² peaks (searched on
    a fine grid over [−3, 3], beyond [0, 1]), plus constant, binary and extreme images."""
    for length_scale, order in ((0.0707, 100), (0.2, 20), (1.0, 3), (5.0, 1)):
        rho = hermite.rho_of(length_scale)
        grid = np.linspace(-3, 3, 6001)
        mass = (hermite.hermite_numpy(grid, rho, order) ** 2).sum(1)
        assert mass.max() <= 1 + 1e-12
        worst = grid[np.argmax(mass)]
        images = np.stack([np.full(784, worst), np.zeros(784), np.ones(784), np.tile([0.0, 1.0], 392),
                           np.full(784, 1e6), np.full(784, -1e30)]).astype(np.float32)  # fmt: skip
        phi = hermite.sum_features(torch.from_numpy(images), rho, order)
        n = norms(phi)
        assert n.max() <= 1 + 1e-5 and n[0] == pytest.approx(math.sqrt(mass.max()), rel=1e-4)


def test_each_contribution_has_norm_at_most_one_so_replacing_one_moves_the_mean_by_at_most_2_over_n():
    rng = np.random.default_rng(2)
    rho = hermite.rho_of(0.2)
    phi = dp_hp.featurizer(rho, 6, np.zeros((0, 2), np.int64), 3, None, (1.0, 0.0, 0.0))
    width = 20 * 7
    for y in range(4):  # one image alone: the mean is its own u_i
        u = embed_net.mean_embedding(rng.random((1, 20)), np.array([y]), phi, width, 4, 0.05)
        assert np.linalg.norm(u) <= 1 + 1e-6
    x, labels = rng.random((30, 20)), rng.integers(0, 4, 30)
    a = embed_net.mean_embedding(x, labels, phi, width, 4, 0.05)
    worst = 0.0
    for _ in range(50):  # replace the last pair by arbitrary ones, labels included
        x2, l2 = x.copy(), labels.copy()
        x2[-1], l2[-1] = rng.random(20) * rng.choice([1.0, 100.0, -3.0]), rng.integers(0, 4)
        worst = max(worst, np.linalg.norm(embed_net.mean_embedding(x2, l2, phi, width, 4, 0.05) - a))
    assert 0 < worst <= 2 / 30 + 1e-9


# ------------------------------------------------------------------------------------------ calibration, noise


@pytest.mark.slow
def test_the_noise_added_to_the_embedding_has_the_calibrated_std(fitted, sixty):
    """embedding_ − the clean embedding is N(0, σ²) per value, σ = z·2/n with z the analytic calibration (χ² of
    the sum of squares and Kolmogorov–Smirnov at α = 1e-3 each; fixed seed)."""
    meta = fitted.meta_
    z = gaussian_release.analytic_noise_multiplier(1.0, 1e-5)
    assert meta["noise_multiplier"] == z and meta["sigma"] == pytest.approx(z * 2 / 60)
    assert meta["accountant"] == gaussian_release.ANALYTIC and meta["secure"] is False
    phi, width = featurize(fitted)
    assert width == 784 * 5
    clean = embed_net.mean_embedding(sixty.flat(), sixty.labels, phi, width, 10, fitted.count_share)
    noise = (fitted.embedding_ - clean) / meta["sigma"]
    assert noise.shape == (10 * width + 10,)
    assert 1e-3 / 2 < stats.chi2(len(noise)).cdf(float(np.sum(noise**2))) < 1 - 1e-3 / 2
    assert stats.kstest(noise, "norm").pvalue > 1e-3


def test_secure_mode_exact_noise_of_the_rdp_size_on_the_same_embedding(sixty):
    """Secure: the released vector is the float embedding (same seed: same features) plus noise of std σ =
    z_RDP·2·(2^20 + sqrt(D + 1)/2)/(2^20·n), up to the lattice rounding (≤ sqrt(D + 1)/2 per row, 2^-20 units)."""
    mech = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty, seed=0)
    meta = mech.meta_
    z = gaussian_release.rdp_noise_multiplier(1.0, 1e-5)
    phi, width = featurize(mech)
    bound = 2**20 + math.sqrt(width + 1) / 2
    z_float = gaussian_release.analytic_noise_multiplier(1.0, 1e-5)
    assert meta["secure"] is True and meta["noise_multiplier"] == z > z_float
    assert meta["sigma"] == pytest.approx(z * 2 * bound / 2**20 / 60, rel=1e-12)
    assert meta["accountant"] == gaussian_release.RDP and meta["lattice_scale"] == 2**20
    clean = embed_net.mean_embedding(sixty.flat(), sixty.labels, phi, width, 10, mech.count_share)
    noise = (mech.embedding_ - clean) / meta["sigma"]
    assert 1e-3 / 2 < stats.chi2(len(noise)).cdf(float(np.sum(noise**2))) < 1 - 1e-3 / 2
    assert stats.kstest(noise, "norm").pvalue > 1e-3
    # The noisy values are integers over n·2^20: the exact sum was released, not a float sum.
    scaled = mech.embedding_ * 60 * 2**20
    np.testing.assert_allclose(scaled, np.rint(scaled), atol=1e-3)
    again = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty, seed=0)
    np.testing.assert_array_equal(again.embedding_, mech.embedding_)
    np.testing.assert_array_equal(again.synthesize(20, 3).images.images, mech.synthesize(20, 3).images.images)


def test_unseeded_secure_fits_draw_the_noise_from_the_os_csprng(sixty, monkeypatch):
    from privpix.privacy.noise import SecureRandom

    seen = []
    real = gaussian_release.exact_gaussian_release

    def spy(acc, epsilon, delta, rng):
        seen.append(type(rng))
        return real(acc, epsilon, delta, rng)

    monkeypatch.setattr(gaussian_release, "exact_gaussian_release", spy)
    a = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty)
    b = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty)
    assert seen == [SecureRandom, SecureRandom]
    assert a.meta_["seed"] is None and "CSPRNG" in a.meta_["noise_rng"]
    assert not np.array_equal(a.embedding_, b.embedding_)


def test_the_guarantee_states_replace_one_per_image_dp_and_its_noise(fitted, sixty):
    g = fitted.privacy((28, 28, 1)).guarantee
    assert (g.model, g.epsilon, g.delta, g.per_image_epsilon, g.sound) == ("central-dp", 1.0, 1e-5, 1.0, True)
    assert g.unit == "one image and its label of the private set" and g.is_dp
    text = " ".join(g.caveats)
    assert "replace-one" in text and "n = 60" in text and "Hermite-feature" in text and "norm at most 1" in text
    assert "analytic Gaussian" in text and "floating-point Gaussian noise" in text and "seed 0" in text
    assert fitted.neighbours() == OneOfBatch(None)
    caps = fitted.capabilities()
    assert (caps.fits_on, caps.output, caps.needs_labels, caps.fixed_shape) == (
        "private",
        "synthetic-images",
        True,
        (28, 28, 1),
    )
    secure = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty, seed=0)
    st_text = " ".join(secure.privacy((28, 28, 1)).guarantee.caveats)
    assert "exact discrete Gaussian" in st_text and "RDP accountant" in st_text and "seed 0" in st_text
    assert "floating-point" not in st_text and "analytic" not in st_text
    z = gaussian_release.rdp_noise_multiplier(1.0, 1e-5)
    assert f"{z:.6g}" in st_text


# ------------------------------------------------------------------------------------------ releases


def test_same_seed_same_synthetic_images_another_seed_others(fitted, sixty):
    again = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)
    np.testing.assert_array_equal(again.embedding_, fitted.embedding_)
    a, b, c = fitted.release(sixty, 3), again.release(sixty, 3), fitted.release(sixty, 4)
    np.testing.assert_array_equal(a.images.images, b.images.images)
    np.testing.assert_array_equal(a.images.labels, b.images.labels)
    assert not np.array_equal(a.images.images, c.images.images)
    other = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=1)
    assert not np.array_equal(other.embedding_, fitted.embedding_)


def test_product_and_fourier_parts_are_drawn_from_the_seed_only(sixty):
    mech = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, prod_sets=3, prod_dims=2, prod_order=3,
                         rff_features=40, **TINY).fit(sixty, seed=0)  # fmt: skip
    assert mech.sets_.shape == (3, 2) and mech.omega_.shape == (784, 20)
    assert mech.embedding_.shape == (10 * (784 * 5 + 3 * 16 + 40) + 10,)
    sets, omega = dp_hp.draw_structure(784, 3, 2, 40, 0.0, mech.meta_["feature_seed"])
    np.testing.assert_array_equal(sets, mech.sets_)
    np.testing.assert_array_equal(omega, mech.omega_)


def test_n_sets_the_published_count_and_does_not_unfit(fitted, sixty, tmp_path):
    assert fitted.synthetic_count(60) == 60
    fitted.set_params(n=250)
    try:
        assert fitted.is_fitted and fitted.synthetic_count(60) == 250 and fitted.synthetic_count(None) == 250
    finally:
        fitted.set_params(n=0)
    path = fitted.save_model(tmp_path / "m.pt")
    loaded = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, model=str(path))
    assert loaded.synthetic_count(None) is None
    assert get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, model=str(path), n=7).synthetic_count(None) == 7
    with pytest.raises(ParameterError, match="n must be >= 0"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, n=-1)


def test_a_model_file_releases_the_same_images_under_its_own_guarantee(fitted, sixty, tmp_path):
    path = fitted.save_model(tmp_path / "m.pt")
    loaded = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, model=str(path)).fit()
    assert loaded.order == 4 and loaded.width == 16 and loaded.secure is False
    np.testing.assert_array_equal(loaded.embedding_, fitted.embedding_)
    np.testing.assert_array_equal(loaded.label_probs_, fitted.label_probs_)
    a, b = fitted.release(sixty, 5), loaded.release(sixty, 5)
    np.testing.assert_array_equal(a.images.images, b.images.images)
    assert a.guarantee == b.guarantee
    with pytest.raises(ParameterError, match="calibrated for ε=1"):
        get_mechanism("dp-hp", epsilon=2.0, delta=1e-5, model=str(path)).fit()
    with pytest.raises(ParameterError, match="order=9 was given"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, model=str(path), order=9).fit()
    with pytest.raises(DataError, match="privpix-dp-hp-1"):  # a dp-merf file is not a dp-hp model
        merf = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_features=20, epochs=1, batch_size=20, width=8,
                             channels=4).fit(sixty, seed=0)  # fmt: skip
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, model=str(merf.save_model(tmp_path / "merf.pt"))).fit()


def test_refuses_what_it_cannot_claim(sixty):
    with pytest.raises(ParameterError, match="delta"):
        get_mechanism("dp-hp", epsilon=1.0).fit(sixty, seed=0)
    # Unlabelled images are one class (unconditional synthesis); a K that says otherwise is refused.
    with pytest.raises(ParameterError, match="unlabelled"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, n_classes=2).fit(ImageSet(sixty.images), seed=0)
    # The data set's declared class names are the class list; an n_classes that contradicts them is refused.
    with pytest.raises(ParameterError, match="contradicts the 10 classes"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, n_classes=5).fit(sixty, seed=0)
    with pytest.raises(ParameterError, match=r"0\.\.4"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, n_classes=5).fit(replace(sixty, class_names=None), seed=0)
    with pytest.raises(ParameterError, match="positive share"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, prod_sets=2, prod_share=0.6, rff_features=10, rff_share=0.4)
    with pytest.raises(ParameterError, match="rff_features must be even"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, rff_features=7)
    with pytest.raises(ParameterError, match=r"length_scale must be >= 0\.001"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, length_scale=0)
    with pytest.raises(ParameterError, match="prod_order"):
        get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, prod_sets=10, prod_dims=6, prod_order=20).fit(sixty, seed=0)


@pytest.mark.slow
def test_end_to_end_500_digits_train_a_classifier_far_above_chance(digits):
    """Fit on 500 built-in digits (50 per class) at ε = 10, δ = 1e-5 (the defaults: order 20, ℓ = 0.5, 16,464
    features; 100 generator steps of 50 images, the fewest steps that raise no ShortTrainingWarning); 2,000
    synthetic images train a logistic regression tested on the other 4,500 real digits: 0.57 on this seed, 0.51 to
    0.57 on seeds 0-3 (chance 0.10; steps of 100 images cost twice as much and gave 0.49 to 0.58). At ℓ = 0.2 the
    generator's pixels all go to 0 on this tiny noisy set (the narrow per-pixel kernel gives almost no gradient
    towards 1 from there)."""
    from sklearn.linear_model import LogisticRegression

    idx = np.arange(0, 5000, 10)
    private, test = digits.subset(idx), digits.subset(np.setdiff1d(np.arange(5000), idx))
    mech = get_mechanism("dp-hp", epsilon=10.0, delta=1e-5, epochs=10, batch_size=50).fit(private, seed=0)
    synth = mech.synthesize(2000, 1).images
    clf = LogisticRegression(max_iter=300).fit(synth.flat(), synth.labels)
    assert clf.score(test.flat(), test.labels) > 0.5
