"""Wang & Chang 2020: GRR, the estimators, the learners, the encoders and the report format."""

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats
from sklearn.naive_bayes import CategoricalNB
from sklearn.neighbors import KNeighborsClassifier, NearestCentroid

from conftest import ReplayedSecure
from privpix.errors import DataError, ParameterError
from privpix.evaluation.ldp_estimators import (
    frequency_estimate,
    frequency_variance,
    mean_estimate,
    mean_estimate_rr,
    mean_variance_exact,
    value_counts,
)
from privpix.evaluation.ldp_learners import LDPKNN, LDPNaiveBayes, LDPNearestCentroid
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.ldp import load_encoder, make_encoder
from privpix.mechanisms.ldp.dcaconv import convolve, dca_filters
from privpix.mechanisms.ldp.reports import ldp_guarantee, perturb, read_reports
from privpix.privacy.grr import grr_perturb, grr_probabilities
from privpix.privacy.noise import make_rng
from privpix.publishing.release import release_to_dir as release
from privpix.publishing.shards import SEEDED_NOISE, stated_guarantee

# ------------------------------------------------------------------------------------------------ GRR


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("d,eps", [(2, 0.5), (16, 1.0), (40, 3.0)])
def test_grr_output_distribution_is_eq3(secure, d, eps):
    rng = ReplayedSecure(7) if secure else make_rng(7)
    n = 40_000
    true = 3 % d
    out = grr_perturb(np.full(n, true), d, eps, rng)
    p, q = grr_probabilities(d, eps)
    assert math.isclose(p / q, math.exp(eps)) and math.isclose(p + (d - 1) * q, 1.0)
    expected = np.full(d, q * n)
    expected[true] = p * n
    observed = np.bincount(out, minlength=d)
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_grr_reproducible_dtype_and_infinity():
    v = np.random.default_rng(0).integers(0, 16, (50, 30))
    a = grr_perturb(v, 16, 1.0, make_rng(3))
    b = grr_perturb(v, 16, 1.0, make_rng(3))
    assert a.dtype == np.uint8 and a.shape == v.shape and (a == b).all() and a.max() < 16
    assert (grr_perturb(v, 16, math.inf, make_rng(3)) == v).all()
    assert grr_perturb(np.zeros(5, int), 300, 1.0, make_rng(0)).dtype == np.uint16


@pytest.mark.parametrize(
    "values,d,eps,msg",
    [
        (np.array([0, 16]), 16, 1.0, "values must be integers in \\[0, 16\\)"),
        (np.array([0.5]), 16, 1.0, "values must be integers"),
        (np.array([0, 1]), 1, 1.0, "d \\(domain size\\)"),
        (np.array([0, 1]), 2, 0.0, "epsilon must be > 0"),
        (np.array([0, 1]), 2, float("nan"), "epsilon must be > 0"),
    ],
)
def test_grr_rejects_bad_input(values, d, eps, msg):
    with pytest.raises(ParameterError, match=msg):
        grr_perturb(values, d, eps, make_rng(0))


def _seeded_counts(d: int, eps: float) -> tuple[int, np.ndarray]:
    """How many of the 2^24 float32 uniforms the seeded sampler keeps an entry for, and how many pick each of the
    d − 1 replacements: every uniform put through grr_perturb's arithmetic (in chunks, to bound memory)."""
    p, _ = grr_probabilities(d, eps)
    p32, stretch = np.float32(p), np.float32((d - 1) / (1.0 - p))
    kept, replaced = 0, np.zeros(d - 1, np.int64)
    for start in range(0, 1 << 24, 1 << 22):
        u = (np.arange(start, start + (1 << 22), dtype=np.float64) * 2.0**-24).astype(np.float32)
        out = u >= p32
        kept += int((~out).sum())
        off = np.minimum(((u[out] - p32) * stretch).astype(np.int64), d - 2)
        replaced += np.bincount(off, minlength=d - 1)
    return kept, replaced


@pytest.mark.parametrize("d,eps", [(2, 12.0), (4, 10.0), (16, 12.0), (16, 14.0), (256, 0.01), (1024, 0.5)])
def test_the_seeded_samplers_true_epsilon_is_counted_exactly(d, eps):
    """seeded_sampler_epsilon against every one of the 2^24 uniforms, as grr_perturb turns them into outputs: the
    largest ratio of any two output probabilities (the kept value's included). Large ε, a small ε over many
    values, and cases on both sides of the tolerance grr_perturb allows."""
    from privpix.privacy.grr import SEEDED_EPSILON_TOLERANCE, seeded_sampler_epsilon

    kept, replaced = _seeded_counts(d, eps)
    assert kept + replaced.sum() == 1 << 24
    probs = np.append(replaced, kept)
    true_eps = math.log(probs.max() / probs.min())
    assert seeded_sampler_epsilon(d, eps) == pytest.approx(true_eps, rel=1e-12)
    refused = (d, eps) in {(16, 14.0), (256, 0.01)}
    assert (true_eps > eps * (1 + SEEDED_EPSILON_TOLERANCE)) == refused


def test_a_seeded_sampler_that_cannot_earn_its_epsilon_is_refused():
    """At ε = 14 over 16 levels the float32 probabilities are 0.5 % off e^ε; at 40 the true value is always kept
    (p rounds to 1): refused, with the exact sampler named. The exact sampler serves both."""
    v = np.arange(16).repeat(4)
    for eps in (14.0, 40.0):
        with pytest.raises(ParameterError, match=f"epsilon={eps:g} over a domain of d=16.*make_rng\\(secure=True\\)"):
            grr_perturb(v, 16, eps, make_rng(0))
        assert grr_perturb(v, 16, eps, make_rng(secure=True)).shape == v.shape
    assert grr_perturb(v, 16, 12.0, make_rng(0)).shape == v.shape


def test_a_release_refused_for_its_seeded_sampler_publishes_nothing_and_charges_nothing(run, tmp_path):
    """The refusal comes from the release's workers, after the plan and the ledger's reservation: it leaves no
    staging, no folder content and no charge, and does not offer --resume, which would run the same command."""
    from PIL import Image

    from privpix.privacy.accounting import PrivacyLedger

    (tmp_path / "in").mkdir()
    for i in range(4):
        Image.fromarray(np.full((6, 6), 60 * i, np.uint8)).save(tmp_path / "in" / f"{i}.png")
    out, ledger = tmp_path / "out", tmp_path / "ledger.json"
    r = run("release", "--input", tmp_path / "in", "--method", "ldp-pixel", "--epsilon", 20, "--seed", 1,
            "--output", out, "--ledger", ledger, "--budget", 1000)  # fmt: skip
    assert r.exit_code == 2 and "would give ε = inf, not 20" in r.output and "--resume" not in r.output, r.output
    assert not out.exists() or not any(out.iterdir())
    assert PrivacyLedger.load(ledger).entries == []


# ------------------------------------------------------------------------------------------ estimators


def _simulate(true_values, d, eps, trials, seed):
    """Counts (trials, m, d) of `trials` independent perturbations of the same owners' values (n, m). One call
    perturbs them all, trial after trial: the same uniforms, and so the same counts, as one call per trial (checked
    with array_equal for these tests' settings), in a fifth of the time."""
    n, m = true_values.shape
    out = grr_perturb(np.broadcast_to(true_values, (trials, n, m)), d, eps, make_rng(seed))
    return value_counts(out.transpose(1, 0, 2).reshape(n, trials * m), d).reshape(trials, m, d)


@pytest.mark.parametrize("d,eps", [(4, 0.5), (16, 2.0)])
def test_frequency_estimator_unbiased_and_variance_is_eq19(d, eps):
    rng = np.random.default_rng(1)
    n, trials = 300, 3000
    true = rng.integers(0, d, (n, 1)) * (rng.random((n, 1)) < 0.5)  # skewed: many zeros
    f = np.bincount(true[:, 0], minlength=d) / n
    est = frequency_estimate(_simulate(true, d, eps, trials, seed=2), n, d, eps)[:, 0, :]  # (trials, d)
    var = frequency_variance(n, f, d, eps)
    # Unbiased: the mean of `trials` estimates is within 4 standard errors of n·f for every value.
    z = (est.mean(0) - n * f) / np.sqrt(var / trials)
    assert np.all(np.abs(z) < 4), z
    # Eq. 19: the sample variance over trials matches (chi-square interval at 99.99 %, per value).
    ratio = est.var(0, ddof=1) / var
    lo, hi = stats.chi2.ppf([5e-5, 1 - 5e-5], trials - 1) / (trials - 1)
    assert np.all((ratio > lo) & (ratio < hi)), ratio
    # The paper's closed form (eq. 19) equals the eq. 18 form used in code.
    e = math.exp(eps)
    eq19 = n * ((d - 2 + e) / (e - 1) ** 2 + f * (d - 2) / (e - 1))
    np.testing.assert_allclose(var, eq19, rtol=1e-10)


def test_mean_estimators_unbiased_with_exact_variance():
    d, eps, n, trials = 16, 1.0, 400, 3000
    rng = np.random.default_rng(5)
    true = rng.integers(0, d, (n, 1)) // 2
    f = np.bincount(true[:, 0], minlength=d) / n
    counts = _simulate(true, d, eps, trials, seed=6)[:, 0, :]
    mu = mean_estimate(counts, n, d, eps)
    var = mean_variance_exact(n, f, d, eps)
    assert abs(mu.mean() - true.mean()) < 4 * math.sqrt(var / trials)
    lo, hi = stats.chi2.ppf([5e-5, 1 - 5e-5], trials - 1) / (trials - 1)
    assert lo < mu.var(ddof=1) / var < hi
    # With GRR the estimated counts sum to n, so the ratio estimator (eq. 28) coincides with eq. 20.
    np.testing.assert_allclose(mean_estimate_rr(counts, n, d, eps), mu, rtol=1e-9)
    np.testing.assert_allclose(frequency_estimate(counts, n, d, eps).sum(-1), n, rtol=1e-9)


# -------------------------------------------------------------------------------------------- learners


@pytest.fixture(scope="module")
def toy():
    """Three classes of 40-feature vectors over d = 8 with class-dependent value distributions."""
    rng = np.random.default_rng(0)
    n, m, d = 900, 40, 8
    y = rng.integers(0, 3, n)
    centre = np.array([1, 4, 6])[y][:, None]
    x = np.clip(centre + rng.integers(-1, 2, (n, m)), 0, d - 1)
    return x, y, d


def test_learners_without_noise_equal_sklearn(toy):
    x, y, d = toy
    xt, yt = x[:600], y[:600]
    nb = LDPNaiveBayes(d=d, epsilon=math.inf, alpha=1.0).fit(xt, yt)
    ref = CategoricalNB(alpha=1.0, min_categories=d).fit(xt, yt)
    np.testing.assert_allclose(nb.predict_log_joint(x[600:]), ref.predict_joint_log_proba(x[600:]), atol=1e-8)
    ncc = LDPNearestCentroid(d=d, epsilon=math.inf).fit(xt, yt)
    np.testing.assert_allclose(ncc.centroids_, NearestCentroid().fit(xt, yt).centroids_)
    knn = LDPKNN(d=d, epsilon=math.inf, n_neighbors=7).fit(xt, yt)
    assert (knn.predict(x[600:]) == KNeighborsClassifier(7).fit(xt, yt).predict(x[600:])).all()


def test_estimated_centroids_are_unbiased(toy):
    x, y, d = toy
    eps, trials = 1.0, 300
    rng = make_rng(11)
    cents = np.stack(
        [LDPNearestCentroid(d=d, epsilon=eps).fit(grr_perturb(x, d, eps, rng), y).centroids_ for _ in range(trials)]
    )
    true = NearestCentroid().fit(x, y).centroids_
    se = cents.std(0, ddof=1) / math.sqrt(trials)
    assert np.all(np.abs(cents.mean(0) - true) < 4.5 * se)


def test_learners_recover_accuracy_from_noisy_reports(toy):
    x, y, d = toy
    rep = grr_perturb(x[:600], d, 1.0, make_rng(2))
    for clf in (
        LDPNaiveBayes(d=d, epsilon=1.0),
        LDPNearestCentroid(d=d, epsilon=1.0),
        LDPKNN(d=d, epsilon=1.0, n_neighbors=25),
    ):
        assert clf.fit(rep, y[:600]).score(x[600:], y[600:]) > 0.9, type(clf).__name__


def test_learners_reject_bad_input(toy):
    x, y, d = toy
    with pytest.raises(ParameterError, match="integers in \\[0, 8\\)"):
        LDPNaiveBayes(d=d, epsilon=1.0).fit(x + 8, y)
    with pytest.raises(ParameterError, match="y must have shape"):
        LDPNaiveBayes(d=d, epsilon=1.0).fit(x, y[:-1])
    with pytest.raises(ParameterError, match="exceeds the 10 training reports"):
        LDPKNN(d=d, epsilon=1.0, n_neighbors=100).fit(x[:10], y[:10])
    with pytest.raises(ParameterError, match="X has 5 features, the model was fitted on 40"):
        LDPNaiveBayes(d=d, epsilon=1.0).fit(x, y).predict(x[:, :5])


# -------------------------------------------------------------------------------------------- encoders


def test_dca_filters_find_the_discriminant_direction():
    """Two classes whose patches differ along one zero-sum direction u, with large nuisance variance along
    another direction w: DCA picks u (PCA would pick w)."""
    rng = np.random.default_rng(0)
    p = 9
    u = np.zeros(p)
    u[0], u[1] = 1, -1
    u /= np.linalg.norm(u)
    w = np.zeros(p)
    w[2], w[3] = 1, -1
    w /= np.linalg.norm(w)
    n = 4000
    y = rng.integers(0, 2, n)
    e = rng.normal(0, 0.1, (n, p)) + np.outer(np.where(y == 1, 1.0, -1.0), u) + np.outer(rng.normal(0, 5, n), w)
    gram = e.T @ e
    sums = np.stack([e[y == k].sum(0) for k in (0, 1)])
    counts = np.bincount(y).astype(float)
    filt, _ = dca_filters(gram, sums, counts, 1, 1e-3, 0.0)
    assert abs(filt[0] @ u) > 0.99
    assert abs(filt[0].sum()) < 1e-6 and math.isclose(np.linalg.norm(filt[0]), 1.0, rel_tol=1e-6)


def test_convolve_is_zero_padded_correlation():
    from scipy import ndimage

    rng = np.random.default_rng(0)
    x = rng.random((3, 11, 9)).astype(np.float32)
    f = rng.standard_normal((2, 25)).astype(np.float32)
    out = convolve(x, f, 1)
    for j in range(2):
        ref = ndimage.correlate(x, f[j].reshape(1, 5, 5), mode="constant")
        np.testing.assert_allclose(out[:, j], ref, atol=1e-5)


def test_convolve_gives_the_same_bits_in_blocks_of_any_size(monkeypatch):
    """A forward pass works on blocks of maps sized to stay in the cache; the codes an encoder released before (and
    the committed results) must not depend on that size: each output is one column's product, in any block."""
    from privpix.mechanisms.ldp import dcaconv

    rng = np.random.default_rng(1)
    for shape, k, stride in (((300, 28, 28), 7, 1), ((70, 13, 10), 3, 2)):
        x = rng.random(shape).astype(np.float32)
        f = rng.standard_normal((4, k * k)).astype(np.float32)
        monkeypatch.setattr(dcaconv, "_CONVOLVE_BYTES", 1 << 60)  # every block of 256 maps, as a fit's
        whole = convolve(x, f, stride)
        for budget in (1, 4 << 20, 100_000):  # 1 map a block, the default, and a size that leaves a short last block
            monkeypatch.setattr(dcaconv, "_CONVOLVE_BYTES", budget)
            assert np.array_equal(convolve(x, f, stride), whole)


def test_hog_of_many_images_is_scikit_images_hog_bit_for_bit():
    """HOG-BoVW's descriptors of all images at once are ``skimage.feature.hog``'s of each image, the same bits,
    for square and uneven sizes, blocks of 1 to 3 cells, float32 and float64, and images with flat areas."""
    from importlib import metadata

    from privpix.mechanisms.ldp import hog

    assert hog._fast_path_available() == (metadata.version("scikit-image") == hog.VERIFIED_SKIMAGE)
    rng = np.random.default_rng(0)
    for n, h, w, orientations, cell, block, dtype in [
        (40, 28, 28, 9, 4, 1, np.float32), (20, 28, 28, 9, 4, 2, np.float32), (10, 32, 29, 8, 4, 3, np.float64),
        (10, 30, 30, 9, 6, 1, np.float32), (10, 29, 31, 12, 3, 2, np.float32),
    ]:  # fmt: skip
        x = rng.random((n, h, w)).astype(dtype)
        x[: n // 2] = np.round(x[: n // 2] * 4) / 4
        got = hog.hog_l2hys(x, orientations, cell, block)
        want = hog._one_at_a_time(x, orientations, cell, block)
        assert got.dtype == want.dtype and np.array_equal(got, want), (h, w, cell, block)


@pytest.fixture(scope="module")
def mnist_small(data_dir):
    from privpix.data import load_dataset

    tr = load_dataset("mnist:train", data_dir).subset(slice(0, 1500))
    te = load_dataset("mnist:test", data_dir).subset(slice(0, 500))
    return tr, te


@pytest.mark.slow
def test_dcaconv_on_mnist_codes_filters_and_roundtrip(mnist_small, tmp_path):
    tr, te = mnist_small
    enc = make_encoder("dcaconv").fit(tr, source="mnist:train")
    assert enc.d == 16 and enc.n_features == 5 * 27 * 27  # L1 maps of the 27x27 pooled codes
    assert [f.shape for f in enc.filters] == [(5, 49), (4, 49)]
    for f in enc.filters:
        np.testing.assert_allclose(f.sum(1), 0, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(f, axis=1), 1, atol=1e-5)
    x = enc.encode(te)
    assert x.dtype == np.uint8 and x.max() < 16 and len(np.unique(x)) == 16
    path = enc.save(tmp_path / "enc.npz")
    again = load_encoder(path)
    # 100 test digits (364,500 codes) are enough to see filters that did not come back (saved as float16, say).
    assert (again.encode(te.subset(slice(0, 100))) == x[:100]).all()
    assert again.fitted_on.startswith("mnist:train (1500 images")
    # Naive Bayes on the clean codes of 1,500 digits already separates them well.
    nb = LDPNaiveBayes(d=16, epsilon=math.inf).fit(enc.encode(tr), tr.labels)
    assert nb.score(x, te.labels) > 0.75
    # d = 2 variant (Table 2); its codes' range does not depend on how many digits the filters were fitted on.
    two = make_encoder("dcaconv", layers="5,1", fit_limit=300).fit(tr)
    assert two.d == 2 and two.encode(te).max() == 1


def test_dcaconv_parameter_errors(mnist_small):
    tr, _ = mnist_small
    with pytest.raises(ParameterError, match="at most one per class \\(10 classes\\)"):
        make_encoder("dcaconv", layers="11,4").fit(tr)
    with pytest.raises(ParameterError, match="layers must be"):
        make_encoder("dcaconv", layers="5,x")
    with pytest.raises(ParameterError, match="needs labelled images"):
        make_encoder("dcaconv").fit(tr.images[:20])
    enc = make_encoder("dcaconv", fit_limit=300).fit(tr)
    with pytest.raises(ParameterError, match="images are 14x14 but encoder dcaconv was fitted on 28x28"):
        enc.encode(tr.resized(14, 14))
    with pytest.raises(ParameterError, match="unknown parameter\\(s\\) filterz"):
        make_encoder("dcaconv", filterz=3)


@pytest.mark.slow
def test_pixel_and_hog_bovw_encoders(mnist_small, tmp_path):
    tr, te = mnist_small
    enc = make_encoder("pixel", levels=16).fit_unsupervised_shape(28, 28)
    x = enc.encode(np.tile(np.array([0, 15, 16, 255], dtype=np.uint8), 196).reshape(1, 28, 28))
    assert x[0, :4].tolist() == [0, 0, 1, 15]  # 16 equal-width levels of 0..255
    codes = enc.encode(te)
    assert codes.shape == (500, 784) and codes.max() == 15
    assert (codes == (te.images[..., 0].reshape(500, -1).astype(int) * 16 // 256)).all()
    mm = make_encoder("pixel", levels=4, scaling="minmax").fit(tr)
    assert mm.encode(tr).max() == 3
    hog = make_encoder("hog-bovw", words=20).fit(tr, seed=0)
    h = hog.encode(te)
    assert h.shape == (500, 20) and h.max() < hog.d
    assert hog.d == hog.encode(tr).max() + 1  # d from the largest count seen at fitting
    assert (load_encoder(hog.save(tmp_path / "h.npz")).encode(te) == h).all()


def test_bnn_encoder_binary_features_and_roundtrip(mnist_small, tmp_path):
    pytest.importorskip("torch")
    tr, te = mnist_small
    # Trained on 500 digits: what is checked is the binary code and its file, not how well it separates digits.
    enc = make_encoder("bnn", epochs=1, hidden=64).fit(tr.subset(slice(0, 500)), seed=0)
    x = enc.encode(te)
    assert enc.d == 2 and x.shape == (500, 5 * 27 * 27) and set(np.unique(x)) == {0, 1}
    assert (load_encoder(enc.save(tmp_path / "b.npz")).encode(te.subset(slice(0, 100))) == x[:100]).all()


def test_load_encoder_errors(tmp_path):
    with pytest.raises(DataError, match="encoder file not found"):
        load_encoder(tmp_path / "none.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DataError, match=r"bad\.npz: not a privpix encoder file"):
        load_encoder(bad)


# ---------------------------------------------------------------------------------------------- reports


def test_reports_guarantee_roundtrip_and_integrity(mnist_small, tmp_path):
    tr, te = mnist_small
    enc = make_encoder("dcaconv", fit_limit=500).fit(tr, source="mnist:train")
    # Reports from a split disjoint from the encoder's fitting data: a sound (m·ε)-LDP guarantee.
    rep = perturb(enc, te, 0.5, make_rng(1), source="mnist:test")
    g = rep.guarantee
    assert g.sound and g.model == "local-dp" and g.per_feature_epsilon == 0.5
    assert g.per_image_epsilon == pytest.approx(0.5 * enc.n_features)
    assert any("label is sent in the clear" in c for c in g.caveats)
    assert any("fitted on mnist:train" in c for c in g.caveats)
    # Reporting the very images the encoder was fitted on is flagged unsound.
    assert not perturb(enc, tr.subset(slice(0, 10)), 0.5, make_rng(1), source="mnist:train").guarantee.sound
    assert ldp_guarantee(math.inf, enc).model == "none"
    # Published through the one release writer, as `privpix release` and `privpix ldp perturb` do: the same seed
    # gives perturb()'s reports.
    mech = get_mechanism("ldp-dcaconv", epsilon=0.5, model=str(enc.save(tmp_path / "enc.npz")))
    out = tmp_path / "rep"
    te = replace(te, source="mnist:test")  # what the guarantee checks against the encoder's "mnist:train"
    manifest = release(mech.fit(), te, out, 1, labels=True)
    assert manifest["epsilon_per_image"] == pytest.approx(0.5 * enc.n_features) and manifest["m"] == enc.n_features
    back = read_reports(out)
    assert (back.values == rep.values).all() and (back.labels == te.labels).all()
    # The planned guarantee, stated with the caveat of its seeded (research) noise.
    stated = stated_guarantee(mech, mech.privacy(te).guarantee, secure=False, seed=1)
    assert SEEDED_NOISE in stated.caveats
    assert back.guarantee.to_dict() == stated.to_dict() and back.guarantee.sound
    with pytest.raises(ParameterError, match="pass force=True"):
        release(mech, te, out, 1)
    raw = bytearray((out / "reports.npz").read_bytes())
    raw[-5] ^= 1
    (out / "reports.npz").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="sha256 does not match"):
        read_reports(out)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(ParameterError, match="holds no privpix manifest"):
        release(mech, te, tmp_path / "other", 1, force=True)
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"


# -------------------------------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_two_party_workflow_on_mnist(run, data_dir, tmp_path):
    import json

    enc = tmp_path / "enc.npz"
    common = ("--data-dir", data_dir, "-q")
    # The data user fits DCAConv on 1,000 labelled test-split digits (standing in for public data) ...
    r = run(
        "ldp",
        "fit-encoder",
        "--encoder",
        "dcaconv",
        "--dataset",
        "mnist:test",
        "--limit",
        1000,
        "--output",
        enc,
        *common,
    )
    assert r.exit_code == 0, r.output
    # ... the owners (here 1,000 training digits: Naive Bayes scored 0.81-0.85 on their reports over seeds 1-3,
    # 0.86 on 3,000's, against the 0.7 asked below and 0.1 by chance) perturb with ε = 2 per feature ...
    rep = tmp_path / "rep"
    r = run(
        "ldp",
        "perturb",
        "--encoder",
        enc,
        "--epsilon",
        2,
        "--dataset",
        "mnist:train",
        "--limit",
        1000,
        "--seed",
        1,
        "--output",
        rep,
        "--data-dir",
        data_dir,
    )
    assert r.exit_code == 0, r.output
    assert "ε per feature: 2" in r.output and "ε per whole image: 7290" in r.output and "sound: yes" in r.output
    manifest = json.loads((rep / "manifest.json").read_text())
    assert manifest["m"] == 3645 and manifest["d"] == 16 and manifest["epsilon_per_image"] == 7290
    # ... and the data user trains Naive Bayes on the reports and scores it on other clean digits.
    out = tmp_path / "nb.json"
    r = run(
        "ldp",
        "train",
        "--reports",
        rep,
        "--classifier",
        "nb",
        "--encoder",
        enc,
        "--test-dataset",
        "mnist:train",
        "--limit",
        500,
        "--seed",
        5,
        "--json",
        out,
        *common,
    )
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["accuracy"] > 0.7 and res["epsilon_per_feature"] == 2 and res["epsilon_per_image"] == 7290
    r = run("ldp", "train", "--reports", rep, "--classifier", "knn", "--param", "n_neighbors=5000", *common)
    assert r.exit_code == 2 and "n_neighbors=5000 exceeds the 1000 training reports" in r.output
    # A pixel encoder needs no data at all.
    pix = tmp_path / "pix.npz"
    r = run("ldp", "fit-encoder", "--encoder", "pixel", "--levels", 4, "--shape", "28x28", "--output", pix, "-q")
    assert r.exit_code == 0, r.output
    r = run(
        "ldp",
        "perturb",
        "--encoder",
        pix,
        "--epsilon",
        1,
        "--dataset",
        "mnist:test",
        "--limit",
        50,
        "--seed",
        0,
        "--output",
        tmp_path / "prep",
        *common,
    )
    assert r.exit_code == 0 and json.loads((tmp_path / "prep" / "manifest.json").read_text())["d"] == 4
    # Errors are one line naming the option.
    r = run(
        "ldp",
        "perturb",
        "--encoder",
        tmp_path / "none.npz",
        "--epsilon",
        1,
        "--dataset",
        "mnist:test",
        "--output",
        tmp_path / "x",
        *common,
    )
    assert r.exit_code == 2 and "none.npz: encoder file not found" in r.output
    r = run("ldp", "perturb", "--encoder", pix, "--epsilon", -1, "--dataset", "mnist:test", "--output", tmp_path / "x")
    assert r.exit_code == 2 and "epsilon must be > 0" in r.output
    r = run("ldp", "fit-encoder", "--encoder", "dcaconv", "--dataset", "mnist:test", "--output", enc, *common)
    assert r.exit_code == 2 and "exists; pass --force" in r.output


def test_grr_with_a_huge_epsilon_is_refused_seeded_and_drawn_exactly_otherwise():
    """Found by the fuzz suite: at ε = 40 the keep probability rounds to 1 and 1 - p divided by zero. The seeded
    sampler would then keep every value, which no finite ε covers: a clear refusal, not a crash, and the exact
    sampler draws it."""
    from privpix.privacy.grr import grr_perturb

    v = np.arange(16) % 4
    with pytest.raises(ParameterError, match="would give ε = inf, not 40"):
        grr_perturb(v, 4, 40.0, np.random.default_rng(0))
    out = grr_perturb(v, 4, 40.0, make_rng(secure=True))
    assert out.shape == v.shape and out.max() < 4


@pytest.mark.slow
def test_privpix_release_publishes_ldp_reports_as_ldp_perturb_does(run, tmp_path):
    """`privpix release` with a feature mechanism writes the report folder `ldp perturb`
    writes (same seed, same values and labels; both through the one release writer), charges a ledger the
    per-image ε, and `ldp train` reads it. The encoder is fitted on 300 built-in training digits, disjoint from the
    built-in test digits reported (checked by their digests: the guarantee is sound). (MNIST's own training split
    is not disjoint from them: the built-in digits are drawn from MNIST.) Two filters per layer, not the default
    5,4: the writer is what is compared, and the 2,500 digits are encoded three times."""
    import json

    enc, quiet = tmp_path / "enc.npz", "-q"
    r = run("ldp", "fit-encoder", "--encoder", "dcaconv", "--param", "layers=2,2", "--dataset", "builtin-mnist:train",
            "--limit", 300, "--output", enc, quiet)  # fmt: skip
    assert r.exit_code == 0, r.output
    perturbed, released = tmp_path / "perturbed", tmp_path / "released"
    r = run("ldp", "perturb", "--encoder", enc, "--epsilon", 2, "--dataset", "builtin-mnist:test", "--seed", 4,
            "--output", perturbed, quiet)  # fmt: skip
    assert r.exit_code == 0, r.output
    ledger = tmp_path / "ledger.json"
    r = run("release", "--method", "ldp-dcaconv", "--param", f"model={enc}", "--epsilon", 2, "--dataset",
            "builtin-mnist:test", "--seed", 4, "--labels", "--output", released, "--ledger", ledger, "--budget",
            1e6, quiet)  # fmt: skip
    assert r.exit_code == 0, r.output
    a, b = np.load(perturbed / "reports.npz"), np.load(released / "reports.npz")
    assert np.array_equal(a["values"], b["values"]) and np.array_equal(a["labels"], b["labels"])
    manifest = json.loads((released / "manifest.json").read_text())
    m = manifest["m"]
    assert manifest["epsilon_per_feature"] == 2 and manifest["guarantee"]["per_image_epsilon"] == 2 * m
    assert manifest["guarantee"]["sound"]
    assert json.loads((perturbed / "manifest.json").read_text())["guarantee"] == manifest["guarantee"]
    [entry] = json.loads(ledger.read_text())["entries"]
    assert entry["epsilon"] == pytest.approx(2 * m) and manifest["ledger"]["entry"] == entry["id"]
    r = run("ldp", "train", "--reports", released, "--classifier", "ncc", "--encoder", enc, "--test-dataset",
            "builtin-mnist:train", "--limit", 200)  # fmt: skip
    assert r.exit_code == 0, r.output
    # Without --labels the reports travel alone; and there are no image files to map, no layout, no shards to size.
    r = run("release", "--method", "ldp-dcaconv", "--param", f"model={enc}", "--epsilon", 2, "--dataset",
            "builtin-mnist:test", "--output", tmp_path / "bare", quiet)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "labels" not in np.load(tmp_path / "bare" / "reports.npz")
    for extra in (["--source-map", str(tmp_path / "map.csv")], ["--format", "parquet"], ["--shard-size", "9"]):
        r = run("release", "--method", "ldp-dcaconv", "--param", f"model={enc}", "--epsilon", 2, "--dataset",
                "builtin-mnist:test", "--output", tmp_path / "x", *extra, quiet)  # fmt: skip
        assert r.exit_code != 0 and extra[0] in r.output and "reports.npz" in r.output


def test_a_vocabulary_larger_than_its_descriptors_is_refused_in_one_line():
    """Found by the command-line fuzz test once `privpix release` took feature mechanisms: HOG-BoVW fitted on three
    8x8 images (12 descriptors) for 50 words was scikit-learn's internal error; now a ParameterError naming words."""
    from privpix.mechanisms.ldp import make_encoder

    x = np.random.default_rng(0).random((3, 8, 8)).astype(np.float32)
    with pytest.raises(ParameterError, match=r"words=50 .* give 12"):
        make_encoder("hog-bovw").fit(x)


@pytest.mark.parametrize(("shape", "params"), [((3, 3), {}), ((8, 7), {"cell": 4, "block": 2}), ((5, 9), {"cell": 6})])
def test_images_smaller_than_one_hog_block_are_refused_naming_cell_and_block(shape, params):
    """scikit-image's own error for an image smaller than one block named none of privpix's parameters."""
    from privpix.mechanisms.ldp import make_encoder

    x = np.random.default_rng(1).random((20, *shape)).astype(np.float32)
    with pytest.raises(
        ParameterError, match=rf"images of {shape[0]}x{shape[1]} are too small .* cell=.* cell or block"
    ):
        make_encoder("hog-bovw", words=2, **params).fit(x)
