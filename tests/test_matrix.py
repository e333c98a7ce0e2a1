import numpy as np
import pytest
from scipy import stats

from privpix.data import ImageSet, load_dataset
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.matrix import ESRA, monotone_singular_values
from privpix.privacy.noise import make_rng


def test_monotone_post_processing():
    v = np.array([[10.0, 14.0, 9.0, -2.0], [5.0, 4.0, 3.0, 1.0]])
    out = monotone_singular_values(v)
    assert np.all(np.diff(out, axis=1) <= 1e-12) and np.all(out >= 0)
    assert np.allclose(out[1], v[1])  # already valid: unchanged
    assert np.allclose(out[0, :2], 12.0)  # the paper's example {10, 14, 9}: PAVA pools the first two


def test_monotone_post_processing_is_the_bounded_least_squares_projection():
    # The clip of the unbounded PAVA solution is the projection onto non-increasing sequences >= 0: the same
    # numbers as scikit-learn's bounded isotonic regression, on rows with negative and tied noisy values.
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(0)
    rows = np.concatenate([rng.normal(0, 5, (200, 12)), np.round(rng.normal(2, 3, (50, 12)))])
    iso = IsotonicRegression(increasing=False, y_min=0.0)
    expected = np.stack([iso.fit_transform(np.arange(12), r) for r in rows])
    assert np.allclose(monotone_singular_values(rows), expected, rtol=0, atol=1e-12)
    assert monotone_singular_values(np.zeros((3, 0))).shape == (3, 0)


def _faces(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return ImageSet(rng.integers(0, 256, (n, 20, 16, 1), dtype=np.uint8))


def test_sra_with_negligible_noise_is_the_truncated_svd():
    x = _faces()
    out = get_mechanism("sra", epsilon=1e12, r=5, clip=False, postprocess=False).release(x, 0).images.images
    a = x.as_float()[..., 0].astype(np.float64)
    q, s, pt = np.linalg.svd(a, full_matrices=False)
    approx = np.einsum("bik,bk,bkj->bij", q[:, :, :5], s[:, :5], pt[:, :5, :])
    assert np.allclose(out[..., 0], approx, atol=1e-5)


def test_sra_noise_is_laplace_scaled_by_the_largest_singular_value():
    mech = get_mechanism("sra", epsilon=2.0, postprocess=False)
    s = np.abs(np.random.default_rng(1).normal(50, 10, (4000, 8)))
    s = -np.sort(-s, axis=1)
    noisy = mech._perturb(s, np.full(4000, 8), 2.0, make_rng(3))
    z = ((noisy - s) / (s[:, :1] / 2.0)).ravel()
    assert stats.kstest(z, stats.laplace().cdf).pvalue > 1e-3


def test_esra_score_is_eq_11():
    s = np.array([[30.0, 20.0, 10.0]])
    u = ESRA.scores(s, m=4, n=3, eps2=0.5)
    r = 2
    expected = np.sqrt(4 - r) + np.sqrt(10.0**2) + np.sqrt(3 - r) + np.sqrt(2) * np.sqrt(30.0**2 + 20.0**2) / 0.5
    assert u[0, r - 1] == pytest.approx(expected)


def test_esra_chooses_r_and_states_unsound_guarantee():
    x = _faces()
    mech = get_mechanism("esra", epsilon=1.0, split=0.3)
    rel = mech.release(x, 0)
    assert rel.images.images.shape == x.images.shape
    assert np.all((mech.last_r_ >= 1) & (mech.last_r_ <= 16))
    g = rel.guarantee
    assert not g.sound and g.per_image_epsilon is None
    assert any("singular vectors" in c for c in g.caveats)
    with pytest.raises(ParameterError, match="split"):
        get_mechanism("esra", epsilon=1.0, split=1.0)


def test_sra_release_reidentifies_faces_even_at_tiny_epsilon(data_dir):
    """The caveat, measured: published singular vectors let a nearest-neighbour attacker match releases to
    their source faces far above chance even at ε = 0.01."""
    faces = load_dataset("orl:test", data_dir)
    rel = get_mechanism("sra", epsilon=0.01).release(faces, 0).images
    a = faces.flat() - faces.flat().mean(axis=1, keepdims=True)
    b = rel.flat() - rel.flat().mean(axis=1, keepdims=True)
    nb = np.linalg.norm(b, axis=1, keepdims=True)
    nb[nb == 0] = 1.0  # a release clipped to one flat grey has no direction; it then matches nobody
    corr = (b / nb) @ (a / np.linalg.norm(a, axis=1, keepdims=True)).T
    top1 = np.mean(corr.argmax(axis=1) == np.arange(len(faces)))
    assert top1 > 0.5  # chance is 1/200; measured 0.90 with seed 0


def test_esra_exponential_mechanism_probabilities_follow_the_scores():
    """Pr[r] ∝ exp(−ε₁ U(A, r) / (2 Δ₁U)) with ε₁ = split·ε: 20,000 copies of one small image each draw r."""
    base = np.random.default_rng(4).integers(0, 256, (1, 6, 5, 1), dtype=np.uint8)
    x = ImageSet(np.repeat(base, 20_000, axis=0))
    eps, split = 40.0, 0.25
    mech = get_mechanism("esra", epsilon=eps, split=split, postprocess=False)
    mech.release(x, 7)
    a = base[0, :, :, 0].astype(np.float64)  # 0-255 units, as ESRA scores them
    q, s, pt = np.linalg.svd(a[None], full_matrices=True)
    eps1, eps2 = split * eps, (1 - split) * eps
    u = ESRA.scores(s, 6, 5, eps2)[0]
    delta_u = np.abs(q[0]).sum(axis=0).max() + 2 * s[0, 0] + np.abs(pt[0]).sum(axis=0).max()
    w = np.exp(-eps1 * (u - u.min()) / (2 * delta_u))
    expected = w / w.sum() * len(x)
    observed = np.bincount(mech.last_r_ - 1, minlength=len(u))
    assert expected.min() > 50  # the test has power on every r
    assert stats.chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.parametrize("method", ["sra", "esra", "lra"])
def test_matrix_mechanisms_are_reproducible_by_seed(method):
    x = _faces(n=3)
    mech = get_mechanism(method, epsilon=2.0)
    a, b, c = (mech.release(x, s).images.images for s in (5, 5, 6))
    assert a.shape == x.images.shape
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_lra_guarantee_noise_level_and_divergence_error():
    x = _faces(n=4)
    rel = get_mechanism("lra", epsilon=1.0, iterations=2).release(x, 0)
    assert not rel.guarantee.sound and rel.guarantee.per_image_epsilon is None
    assert any("factor B" in c for c in rel.guarantee.caveats)
    err = {
        e: np.mean((get_mechanism("lra", epsilon=e, iterations=2).release(x, 1).images.images - x.as_float()) ** 2)
        for e in (0.5, 1e4)
    }
    assert err[1e4] < err[0.5] / 4  # less noise, closer to the image
    with pytest.raises(ParameterError, match=r"lra: SGD diverged at epsilon=0\.01"):
        get_mechanism("lra", epsilon=0.01, max_step=0, iterations=3).release(x, 0)


def test_lra_vectorised_sgd_equals_the_entrywise_algorithm():
    """The vectorised steps visit the same (i, j) entries, with the same noise, as a plain loop over entries
    of steps 2–6: row update and column update both from the old values."""
    from privpix.mechanisms.matrix import _clip_rows, _unit_laplace32

    rng_x = np.random.default_rng(3)
    x = rng_x.random((2, 7, 5, 1)).astype(np.float32)
    mech = get_mechanism("lra", epsilon=2.0, iterations=2)
    got = mech.release(ImageSet(images=x), np.random.default_rng(9)).images.as_float()

    h, w, k = 7, 5, 5
    mats = np.moveaxis(x.astype(np.float64), 3, 1).reshape(2, h, w)
    q, s, pt = np.linalg.svd(mats, full_matrices=False)
    root = np.sqrt(s[:, :k])
    b = (q[:, :, :k] * root[:, None, :]).astype(np.float32)
    lt = (pt[:, :k, :].transpose(0, 2, 1) * root[:, None, :]).astype(np.float32)
    scale = (np.abs(lt).sum(axis=2).max(axis=1) / 2.0).astype(np.float32)
    a, g, tau, cap = mats.astype(np.float32), np.float32(0.01), np.float32(0.1), np.float32(0.05)
    rng = np.random.default_rng(9)
    for _ in range(2):
        for t in range(w):
            for start in range(0, h, w):
                rows = range(start, min(start + w, h))
                noise = _unit_laplace32(rng, (2, len(rows), k))
                for n in range(2):
                    for r, i in enumerate(rows):
                        j = (i + t) % w
                        noisy = lt[n, j] + noise[n, r] * scale[n]
                        e = a[n, i, j] - b[n, i] @ noisy
                        new_b = b[n, i] + _clip_rows(g * (e * noisy - tau * b[n, i]), cap)
                        lt[n, j] = lt[n, j] + _clip_rows(g * (e * b[n, i] - tau * lt[n, j]), cap)
                        b[n, i] = new_b
    from privpix.privacy.noise import laplace

    final = lt + laplace(rng, 1.0, lt.shape).astype(np.float32) * scale[:, None, None]
    want = np.clip(np.einsum("nik,njk->nij", b, final), 0, 1)
    np.testing.assert_allclose(got[..., 0], want, atol=1e-5)
