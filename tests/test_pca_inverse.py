"""Zhang et al. 2022: PCA-inverse privatization, its closed-form inverse, noise scales and honest guarantees."""

import math

import numpy as np
import pytest
from scipy import stats

from privpix.data import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.pca_inverse import batch_pca


def _images(n=100, h=8, w=6, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.random((3, h * w))
    mix = rng.random((n, 3))
    x = np.clip(mix @ base / 1.5 + rng.normal(0, 0.03, (n, h * w)), 0, 1)
    return ImageSet((x.reshape(n, h, w, 1) * 255).astype(np.uint8))


def test_closed_form_inverse_is_eq13():
    rng = np.random.default_rng(0)
    x = rng.random((30, 20))
    _, e = batch_pca(x[None], 5)
    e = e[0]
    lam = 1e-3
    row = rng.normal(size=5)
    explicit = row @ e.T @ np.linalg.inv(e @ e.T + lam * np.eye(20))
    np.testing.assert_allclose(explicit, row @ e.T / (1 + lam), atol=1e-9)
    # Axes are orthonormal and match the SVD's.
    np.testing.assert_allclose(e.T @ e, np.eye(5), atol=1e-9)
    _, _, vt = np.linalg.svd(x - x.mean(0), full_matrices=False)
    np.testing.assert_allclose(np.abs(np.sum(e * vt[:5].T, axis=0)), 1, atol=1e-9)


def test_private_basis_noise_is_laplace_scaled_by_the_observed_range():
    x = _images(n=100)
    eps, d = 2.0, 4
    out = get_mechanism("pca-inverse", epsilon=eps, d=d, clip=False, lambda_inv=0.0).release(x, 3).images.images
    flat = x.as_float().reshape(100, -1).astype(np.float64)
    mean, e = batch_pca(flat[None], d)
    coef = (flat - mean[0]) @ e[0]
    noise = (out.reshape(100, -1).astype(np.float64) - mean[0]) @ e[0] - coef
    z = noise / ((coef.max(0) - coef.min(0)) / eps)
    assert stats.kstest(z.ravel(), stats.laplace().cdf).pvalue > 1e-3


def test_release_without_noise_is_the_pca_reconstruction_and_batches_are_separate():
    x = _images(n=250)
    out = get_mechanism("pca-inverse", epsilon=1e12, d=3, batch=100, clip=False).release(x, 0).images.images
    flat = x.as_float().reshape(250, -1).astype(np.float64)
    for s in (0, 100, 200):  # 100 + 100 + a last batch of 50, each with its own PCA
        chunk = flat[s : s + 100]
        mean, e = batch_pca(chunk[None], 3)
        rec = (chunk - mean[0]) @ e[0] @ e[0].T / (1 + 1e-6) + mean[0]
        np.testing.assert_allclose(out.reshape(250, -1)[s : s + 100], rec, atol=1e-4)


def test_guarantees_are_honest():
    g = get_mechanism("pca-inverse", epsilon=1.0, d=20).privacy((28, 28, 1)).guarantee
    assert not g.sound and g.per_image_epsilon is None
    assert any("d·ε = 20" in c for c in g.caveats) and any("computed on the private images" in c for c in g.caveats)
    pub = get_mechanism("pca-inverse", epsilon=1.0, basis="public").privacy((28, 28, 1)).guarantee
    assert pub.sound and pub.per_image_epsilon == 1.0
    dp = (
        get_mechanism("pca-inverse", epsilon=1.0, basis="dp", delta=1e-5, basis_epsilon=0.5)
        .privacy((28, 28, 1))
        .guarantee
    )
    assert dp.sound and dp.per_image_epsilon == 1.5 and dp.delta == 1e-5
    with pytest.raises(ParameterError, match="basis=dp needs a delta"):
        get_mechanism("pca-inverse", epsilon=1.0, basis="dp")
    with pytest.raises(ParameterError, match="delta is only used by basis=dp"):
        get_mechanism("pca-inverse", epsilon=1.0, delta=1e-5)
    with pytest.raises(ParameterError, match="not fitted; call fit"):
        get_mechanism("pca-inverse", epsilon=1.0, basis="public").release(_images(10), 0)


def test_public_basis_clips_and_calibrates_to_the_whole_vector():
    public, private = _images(n=300, seed=1), _images(n=400, seed=2)
    eps, d = 3.0, 5
    mech = get_mechanism("pca-inverse", epsilon=eps, d=d, basis="public", clip=False, lambda_inv=0.0).fit(public)
    mean, e, bound = mech.public_fit_
    out = mech.release(private, 4).images.images.reshape(400, -1).astype(np.float64)
    coef = (private.as_float().reshape(400, -1) - mean) @ e
    coef *= np.minimum(1, bound / np.linalg.norm(coef, axis=1, keepdims=True))
    z = ((out - mean) @ e - coef) / (2 * math.sqrt(d) * bound / eps)
    assert stats.kstest(z.ravel(), stats.laplace().cdf).pvalue > 1e-3
    # The output for one image depends on that image alone (plus public data): releasing it alone with the
    # same noise stream gives the same output.
    one = mech.release(private.subset([0]), 4).images.images.reshape(1, -1)
    np.testing.assert_allclose(one[0], out[0], atol=1e-5)
    with pytest.raises(ParameterError, match="resize them to match"):
        mech.release(ImageSet(np.zeros((2, 4, 4, 1), np.uint8)), 0)


def test_dp_basis_release_shape_and_seed():
    x = _images(n=120)
    mech = get_mechanism("pca-inverse", epsilon=5.0, d=3, basis="dp", delta=1e-5, basis_epsilon=1.0)
    a, b = (mech.release(x, 9).images.images for _ in range(2))
    assert a.shape == x.images.shape and np.array_equal(a, b) and 0 <= a.min() and a.max() <= 1


def test_mnist_private_release_keeps_digits_at_large_epsilon(data_dir):
    from privpix.data import load_dataset

    te = load_dataset("mnist:test", data_dir).subset(slice(0, 300))
    big = get_mechanism("pca-inverse", epsilon=1000.0, d=50).release(te, 0).images.as_float()
    small = get_mechanism("pca-inverse", epsilon=0.5, d=50).release(te, 0).images.as_float()
    err = {k: float(np.mean((v - te.as_float()) ** 2)) for k, v in (("big", big), ("small", small))}
    assert err["big"] < 0.02 < err["small"]


def test_cli_release_pca_inverse_paper_and_public(run, data_dir, tmp_path):
    import json

    base = ("release", "--dataset", "orl:test", "--method", "pca-inverse", "--epsilon", 5, "--seed", 1)
    out = tmp_path / "paper"
    r = run(*base, "--param", "d=10", "--output", out, "--data-dir", data_dir, "-q")
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["images"] == 200 and m["guarantee"]["sound"] is False and m["parameters"]["batch"] == 100
    out = tmp_path / "public"
    r = run(*base, "--param", "basis=public", "--param", "public=orl:train", "--output", out, "--data-dir", data_dir)
    assert r.exit_code == 0, r.output
    assert "ε per whole image: 5" in r.output and "sound: yes" in r.output
