"""dp-merf: unit-norm features, the accountant's calibration, the noise actually added, seeds,
labels from the DP label distribution, the guarantee, the model file, and an end-to-end fit on 500 digits."""

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
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.synthesis import dp_merf, embedding, merf_net
from privpix.privacy.neighbours import OneOfBatch

TINY = {"n_features": 2000, "epochs": 1, "batch_size": 20, "width": 16, "channels": 4}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_features_gradient_is_autograds_bit_for_bit():
    """φ keeps the cosines and sines of its forward pass for its gradient; the values and the gradient are what
    autograd computes from [cos(xΩ), sin(xΩ)] · scale, bit for bit, so seeded generator trainings are unchanged."""
    import torch

    rng = np.random.default_rng(4)
    omega = torch.from_numpy(rng.normal(size=(64, 300)).astype(np.float32))
    for _ in range(3):
        x = torch.from_numpy(rng.random((50, 64)).astype(np.float32))
        weight = torch.from_numpy(rng.normal(size=(50, 600)).astype(np.float32))
        got_x, want_x = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        got = merf_net.features(got_x, omega)
        proj = want_x @ omega
        want = torch.cat([torch.cos(proj), torch.sin(proj)], dim=1) * math.sqrt(1.0 / 300)
        (got * weight).sum().backward()
        (want * weight).sum().backward()
        assert torch.equal(got, want) and torch.equal(got_x.grad, want_x.grad)
    with torch.no_grad():  # featurizing private images: no gradient kept
        assert torch.equal(merf_net.features(x, omega), want.detach())


@pytest.fixture(scope="module")
def fitted(sixty):
    return get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)


# ------------------------------------------------------------------------------------------ features


def test_features_have_unit_norm_for_random_images():
    rng = np.random.default_rng(0)
    for dim, d in ((784, 10000), (3072, 64), (5, 2)):
        omega = dp_merf.frequencies(dim, d, 0.0, seed=1)
        x = rng.random((50, dim)) * rng.choice([1.0, 255.0, 1e3])
        phi = dp_merf.feature_map(x, omega)
        assert phi.shape == (50, d)
        np.testing.assert_allclose(np.linalg.norm(phi.astype(np.float64), axis=1), 1.0, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    x=arrays(np.float32, (3, 12), elements=st.floats(-1e4, 1e4, width=32)),
    d=st.integers(1, 40).map(lambda k: 2 * k),
    scale=st.floats(1e-3, 1e3),
)
def test_features_have_unit_norm_whatever_the_pixels(x, d, scale):
    phi = dp_merf.feature_map(x, dp_merf.frequencies(12, d, scale, seed=0))
    np.testing.assert_allclose(np.linalg.norm(phi.astype(np.float64), axis=1), 1.0, atol=1e-5)


def test_each_contribution_has_norm_one_so_replacing_one_moves_the_mean_by_at_most_2_over_n():
    rng = np.random.default_rng(2)
    omega = dp_merf.frequencies(20, 64, 0.0, seed=3)
    for y in range(4):  # one image alone: the mean is its own u_i
        u = merf_net.mean_embedding(rng.random((1, 20)), np.array([y]), omega, 4, 0.05)
        assert np.linalg.norm(u) == pytest.approx(1.0, abs=1e-6)
    x, labels = rng.random((30, 20)), rng.integers(0, 4, 30)
    a = merf_net.mean_embedding(x, labels, omega, 4, 0.05)
    worst = 0.0
    for _ in range(50):  # replace the last pair by arbitrary ones, labels included
        x2, l2 = x.copy(), labels.copy()
        x2[-1], l2[-1] = rng.random(20) * rng.choice([1.0, 100.0]), rng.integers(0, 4)
        worst = max(worst, np.linalg.norm(merf_net.mean_embedding(x2, l2, omega, 4, 0.05) - a))
    assert 0 < worst <= 2 / 30 + 1e-9


def test_default_kernel_is_dp_merfs_mnist_kernel_and_reads_no_data():
    assert dp_merf.default_length_scale(784) == pytest.approx(math.sqrt(105))
    omega = dp_merf.frequencies(784, 20000, 0.0, seed=0)
    assert omega.std() == pytest.approx(1 / math.sqrt(105), rel=0.01)


# ------------------------------------------------------------------------------------------ calibration


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-7])
def test_noise_multiplier_gives_the_target_epsilon_by_the_accountant(epsilon, delta):
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    z = dp_merf.noise_multiplier(epsilon, delta)
    # The other way round: the accountant's ε for this z is at most the target, and close to it (z is minimal).
    eps = dp_merf.epsilon_of(z, delta)
    assert eps <= epsilon and eps == pytest.approx(epsilon, rel=1e-6)
    assert dp_merf.epsilon_of(z * (1 - 1e-4), delta) > epsilon
    # The PLD accountant (a second, independent computation, pessimistic by its discretisation) agrees.
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(dp_accounting.GaussianDpEvent(z))
    assert pld.get_epsilon(delta) == pytest.approx(epsilon, rel=1e-3)


def test_sigma_for_the_mnist_benchmark():
    """σ on each embedding value for n = 60,000 at δ = 1e-5 (numbers quoted in docs/synthesis.md)."""
    z1, z10 = dp_merf.noise_multiplier(1.0, 1e-5), dp_merf.noise_multiplier(10.0, 1e-5)
    assert z1 == pytest.approx(3.7306, abs=1e-4) and z10 == pytest.approx(0.49989, abs=1e-5)
    assert z1 * embedding.sensitivity(60000) == pytest.approx(1.2435e-4, rel=1e-4)


def test_the_noise_added_to_the_embedding_has_the_calibrated_std(fitted, sixty):
    """embedding_ − the clean embedding, over its K·D + K = 20,010 values, is N(0, σ²) with σ = z·2/n. Two tests
    at α = 1e-3 each (χ² of the sum of squares, two-sided; Kolmogorov–Smirnov): a false alarm on a correct
    sampler with probability at most 2e-3 over seeds; the seed is fixed, so the outcome is too."""
    meta = fitted.meta_
    assert meta["sigma"] == pytest.approx(dp_merf.noise_multiplier(1.0, 1e-5) * 2 / 60)
    clean = merf_net.mean_embedding(sixty.flat(), sixty.labels, fitted.omega_, 10, fitted.count_share)
    noise = (fitted.embedding_ - clean) / meta["sigma"]
    assert noise.shape == (10 * 2000 + 10,)
    s = float(np.sum(noise**2))
    chi2 = stats.chi2(len(noise))
    assert 1e-3 / 2 < chi2.cdf(s) < 1 - 1e-3 / 2
    assert stats.kstest(noise, "norm").pvalue > 1e-3


# ------------------------------------------------------------------------------------------ releases


def test_same_seed_same_synthetic_images_another_seed_others(fitted, sixty):
    again = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)
    np.testing.assert_array_equal(again.embedding_, fitted.embedding_)
    a, b, c = fitted.release(sixty, 3), again.release(sixty, 3), fitted.release(sixty, 4)
    np.testing.assert_array_equal(a.images.images, b.images.images)
    np.testing.assert_array_equal(a.images.labels, b.images.labels)
    assert not np.array_equal(a.images.images, c.images.images)
    other = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=1)
    assert not np.array_equal(other.embedding_, fitted.embedding_)
    assert not np.array_equal(other.release(sixty, 3).images.images, a.images.images)


def test_the_default_schedule_trains_the_minimum_whatever_n_and_changes_no_noise(sixty):
    """epochs=0: 5 epochs of max(ceil(n / batch_size), MIN_GENERATOR_STEPS / 5) steps. The noisy embedding is the
    same for a seed whatever the schedule (training the generator is post-processing); where DP-MERF's 5 epochs
    already reach the minimum (60 images in batches of 2: 30 steps an epoch), the default is that schedule, bit for
    bit."""
    small = {**{k: v for k, v in TINY.items() if k != "epochs"}, "n_features": 200, "batch_size": 10}
    sixty = sixty.resized(8, 8)  # small images and batches: a short test
    default = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **small).fit(sixty, seed=0)
    one = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **small, epochs=1).fit(sixty, seed=0)
    assert default.epochs == 0 and one.meta_["generator_steps"] == 6  # 1 epoch of ceil(60 / 10)
    assert default.meta_["generator_steps"] == embedding.MIN_GENERATOR_STEPS == 5 * 20
    assert default.meta_["generator_epochs"] == len(default.meta_["history"]["loss"]) == 5
    np.testing.assert_array_equal(default.embedding_, one.embedding_)
    assert default.privacy(sixty).guarantee == one.privacy(sixty).guarantee
    pairs = {**small, "batch_size": 2}
    auto = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **pairs).fit(sixty, seed=0)
    five = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **pairs, epochs=5).fit(sixty, seed=0)
    assert auto.meta_["generator_steps"] == five.meta_["generator_steps"] == 150
    np.testing.assert_array_equal(auto.synthesize(20, 1).images.images, five.synthesize(20, 1).images.images)


def test_labels_come_from_the_dp_label_distribution_not_from_the_input(digits):
    # A private set with 70 % of class 1; the release input is all 7s: synthetic labels follow p̂, not the input.
    ones, rest = np.flatnonzero(digits.labels == 1)[:140], np.flatnonzero(digits.labels != 1)[::75][:60]
    private = digits.subset(np.concatenate([ones, rest]))
    mech = get_mechanism("dp-merf", epsilon=10.0, delta=1e-5, **TINY).fit(private, seed=0)
    true = np.bincount(private.labels, minlength=10) / len(private)
    probs = mech.label_probs_
    assert probs.sum() == pytest.approx(1.0) and probs.min() >= 0
    # The released proportions: noisy, yet close (noise of std σ/a each; 5 std bound all ten, false alarm ~6e-6),
    # and p̂ is their post-processing (negatives to 0, normalised).
    raw = mech.embedding_[-10:] / math.sqrt(mech.count_share)
    sd = mech.meta_["sigma"] / math.sqrt(mech.count_share)
    assert np.abs(raw - true).max() < 5 * sd and not np.array_equal(raw, true)
    np.testing.assert_allclose(probs, np.maximum(raw, 0) / np.maximum(raw, 0).sum())
    sevens = digits.subset(np.flatnonzero(digits.labels == 7)[:400])
    rel = mech.release(sevens, 0)
    labels = rel.images.labels
    assert rel.source is sevens and not np.array_equal(labels, sevens.labels)
    counts = np.bincount(labels, minlength=10)
    keep = probs > 0
    assert counts[~keep].sum() == 0
    # χ² goodness of fit to p̂ at α = 1e-3 (false alarm 1e-3 over seeds; fixed seed here).
    assert stats.chisquare(counts[keep], probs[keep] * len(labels)).pvalue > 1e-3


def test_the_guarantee_states_replace_one_per_image_dp(fitted):
    g = fitted.privacy((28, 28, 1)).guarantee
    assert (g.model, g.epsilon, g.delta, g.per_image_epsilon, g.sound) == ("central-dp", 1.0, 1e-5, 1.0, True)
    assert g.unit == "one image and its label of the private set" and g.is_dp
    text = " ".join(g.caveats)
    assert "replace-one" in text and "n = 60" in text and "dp-accounting" in text
    assert fitted.neighbours() == OneOfBatch(None)
    caps = fitted.capabilities()
    assert (caps.fits_on, caps.output, caps.needs_labels) == ("private", "synthetic-images", True)
    # One Gaussian release of the embedding: charged as such, and what the audit reads its curve from.
    claim = fitted.privacy((28, 28, 1))
    assert claim.events == claim.unit_events and [type(e).__name__ for e in claim.events] == ["GaussianNoise"]
    assert caps.fixed_shape == (28, 28, 1)


def test_a_model_file_releases_the_same_images_under_its_own_guarantee(fitted, sixty, tmp_path):
    path = fitted.save_model(tmp_path / "m.pt")
    loaded = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(path)).fit()
    assert loaded.n_features == 2000 and loaded.width == 16  # the file's training parameters are in force
    np.testing.assert_array_equal(loaded.embedding_, fitted.embedding_)
    a, b = fitted.release(sixty, 5), loaded.release(sixty, 5)
    np.testing.assert_array_equal(a.images.images, b.images.images)
    assert a.guarantee == b.guarantee
    with pytest.raises(ParameterError, match="calibrated for ε=1"):
        get_mechanism("dp-merf", epsilon=2.0, delta=1e-5, model=str(path)).fit()
    changed = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)
    changed.epsilon = 2.0  # the noise was calibrated for ε = 1: releasing under ε = 2 would lie
    with pytest.raises(ParameterError, match="not fitted"):
        changed.release(sixty, 0)


def test_refuses_what_it_cannot_claim(sixty):
    with pytest.raises(ParameterError, match="delta"):
        get_mechanism("dp-merf", epsilon=1.0).fit(sixty, seed=0)
    # Unlabelled images are one class (unconditional synthesis); a K that says otherwise is refused.
    with pytest.raises(ParameterError, match="unlabelled"):
        get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_classes=2).fit(ImageSet(sixty.images), seed=0)
    # The data set's declared class names are the class list; an n_classes that contradicts them is refused.
    with pytest.raises(ParameterError, match="contradicts the 10 classes"):
        get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_classes=5).fit(sixty, seed=0)
    with pytest.raises(ParameterError, match=r"0\.\.4"):
        get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_classes=5).fit(replace(sixty, class_names=None), seed=0)
    with pytest.raises(ParameterError, match="even"):
        get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_features=7)
    with pytest.raises(ParameterError, match="divisible by 4"):
        get_mechanism("dp-merf", epsilon=1.0, delta=1e-5).fit(sixty.resized(30, 30), seed=0)


@pytest.mark.slow
def test_end_to_end_500_digits_train_a_classifier_far_above_chance(digits):
    """Fit on 500 built-in digits (50 per class) at ε = 10, δ = 1e-5 (D = 2,000, 100 generator steps of 50 images,
    the fewest steps that raise no ShortTrainingWarning); 2,000 synthetic images train a logistic regression tested
    on the other 4,500 real digits: 0.66 on this seed, 0.66 to 0.72 on seeds 0-3 (chance 0.10; steps of 100 images
    cost twice as much and gave 0.63 to 0.70; the same classifier on the 500 real digits: 0.86)."""
    from sklearn.linear_model import LogisticRegression

    idx = np.arange(0, 5000, 10)
    private, test = digits.subset(idx), digits.subset(np.setdiff1d(np.arange(5000), idx))
    mech = get_mechanism("dp-merf", epsilon=10.0, delta=1e-5, n_features=2000, epochs=10, batch_size=50)
    mech.fit(private, seed=0)
    synth = mech.release(test.subset(np.arange(2000)), 1).images
    clf = LogisticRegression(max_iter=300).fit(synth.flat(), synth.labels)
    assert clf.score(test.flat(), test.labels) > 0.5


# ------------------------------------------------------------------------------------------ secure mode, n


@pytest.fixture(scope="module")
def secure(sixty):
    return get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty, seed=0)


def test_secure_mode_releases_the_float_embedding_plus_exact_noise_of_the_rdp_size(fitted, secure, sixty):
    """Secure: same seed, same frequencies; the released vector is the float mode's clean embedding plus discrete
    Gaussian noise of std σ = z_RDP·2·(2^20 + sqrt(D + 1)/2)/(2^20·n) (the lattice rounding, ≤ sqrt(D + 1)/2 units
    of 2^-20 per row, counted in the sensitivity), checked by χ² and Kolmogorov–Smirnov at α = 1e-3 each."""
    from privpix.privacy import gaussian_release

    np.testing.assert_array_equal(secure.omega_, fitted.omega_)
    meta = secure.meta_
    z = gaussian_release.rdp_noise_multiplier(1.0, 1e-5)
    assert meta["secure"] is True and meta["noise_multiplier"] == z > dp_merf.noise_multiplier(1.0, 1e-5)
    assert meta["sigma"] == pytest.approx(z * 2 * (2**20 + math.sqrt(2001) / 2) / 2**20 / 60, rel=1e-12)
    assert meta["accountant"] == gaussian_release.RDP and "exact discrete Gaussian" in meta["noise"]
    clean = merf_net.mean_embedding(sixty.flat(), sixty.labels, secure.omega_, 10, secure.count_share)
    noise = (secure.embedding_ - clean) / meta["sigma"]
    assert 1e-3 / 2 < stats.chi2(len(noise)).cdf(float(np.sum(noise**2))) < 1 - 1e-3 / 2
    assert stats.kstest(noise, "norm").pvalue > 1e-3
    scaled = secure.embedding_ * 60 * 2**20  # integers: the exact sum was released
    np.testing.assert_allclose(scaled, np.rint(scaled), atol=1e-3)
    again = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty, seed=0)
    np.testing.assert_array_equal(again.embedding_, secure.embedding_)
    np.testing.assert_array_equal(again.release(sixty, 2).images.images, secure.release(sixty, 2).images.images)


def test_the_secure_guarantee_states_exact_noise_and_the_rdp_calibration(fitted, secure):
    from privpix.privacy import gaussian_release

    plain, exact = (
        " ".join(fitted.privacy((28, 28, 1)).guarantee.caveats),
        " ".join(secure.privacy((28, 28, 1)).guarantee.caveats),
    )
    assert "floating-point Gaussian noise" in plain and "analytic Gaussian" in plain
    assert f"{dp_merf.noise_multiplier(1.0, 1e-5):.6g}" in plain
    assert "exact discrete Gaussian" in exact and "RDP accountant" in exact and "2^-20" in exact
    assert "floating-point" not in exact and "analytic" not in exact
    assert f"{gaussian_release.rdp_noise_multiplier(1.0, 1e-5):.6g}" in exact
    for text in (plain, exact):  # the seed caveat stays in both modes
        assert "replace-one" in text and "seed 0, which the model file records: anyone who holds the file" in text
    assert secure.privacy((28, 28, 1)).guarantee.epsilon == 1.0 and secure.privacy((28, 28, 1)).guarantee.sound


def test_unseeded_fits_draw_the_noise_from_the_os_csprng(sixty, monkeypatch):
    from privpix.mechanisms.synthesis import embedding
    from privpix.privacy import gaussian_release
    from privpix.privacy.noise import SecureRandom

    seen = []
    exact, gauss = gaussian_release.exact_gaussian_release, embedding.gaussian
    monkeypatch.setattr(gaussian_release, "exact_gaussian_release",
                        lambda acc, e, d, rng: seen.append(type(rng)) or exact(acc, e, d, rng))  # fmt: skip
    monkeypatch.setattr(embedding, "gaussian", lambda rng, s, shape: seen.append(type(rng)) or gauss(rng, s, shape))
    a = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, secure=True, **TINY).fit(sixty)
    b = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty)
    assert seen == [SecureRandom, SecureRandom]
    assert a.meta_["seed"] is None and "CSPRNG" in a.meta_["noise_rng"] and "CSPRNG" in b.meta_["noise_rng"]
    assert not any("seed" in c for c in a.privacy((28, 28, 1)).guarantee.caveats[1:])


def test_secure_is_a_training_parameter_recorded_in_the_model_file(fitted, secure, sixty, tmp_path):
    loaded = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(secure.save_model(tmp_path / "s.pt"))).fit()
    assert loaded.secure is True and loaded.privacy((28, 28, 1)).guarantee == secure.privacy((28, 28, 1)).guarantee
    np.testing.assert_array_equal(loaded.embedding_, secure.embedding_)
    changed = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)
    changed.secure = True  # the noise was not the exact one: the guarantee would misstate it
    assert not changed.is_fitted
    # A file written before the secure mode existed (no "secure" in its meta) is a float-mode model.
    old = fitted.meta_
    fitted.meta_ = {k: v for k, v in old.items() if k not in ("secure", "noise")}
    try:
        path = fitted.save_model(tmp_path / "old.pt")
    finally:
        fitted.meta_ = old
    legacy = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(path)).fit()
    assert legacy.secure is False and legacy.privacy((28, 28, 1)).guarantee == fitted.privacy((28, 28, 1)).guarantee


def test_n_is_the_published_count_and_not_a_training_parameter(fitted, sixty, tmp_path):
    assert fitted.synthetic_count(60) == 60 and fitted.synthetic_count(None) is None
    fitted.n = 1000
    try:
        assert fitted.is_fitted and fitted.synthetic_count(60) == 1000 and fitted.synthetic_count(None) == 1000
        assert fitted.get_params()["n"] == 1000
    finally:
        fitted.n = 0
    path = fitted.save_model(tmp_path / "m.pt")
    assert get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(path)).synthetic_count(None) is None
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(path), n=30).fit()
    rel = mech.synthesize(mech.synthetic_count(None), 0)
    assert len(rel.images) == 30 and rel.images.labels.shape == (30,)
    with pytest.raises(ParameterError, match="n must be an integer"):
        get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n=2.5)
