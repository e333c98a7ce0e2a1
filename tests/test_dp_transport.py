"""dp-transport: the transport map, the moments it reads back, the noise-aware shrinkage, the drawing generator,
the public set's rules, model files, dp-synth's choice on faces, and faces from real data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privpix.data import load_dataset
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.registry import canonical_spec
from privpix.mechanisms.synthesis import dp_transport as tr
from privpix.mechanisms.synthesis import embed_net


def _psd(rng, k, scale=1.0):
    a = rng.normal(0, scale, (k, k))
    return a @ a.T / k + 1e-3 * np.eye(k)


def test_the_transport_map_carries_one_covariance_onto_the_other_and_is_symmetric():
    """A·S·Aᵀ = Σ, and A is symmetric positive semi-definite: the gradient of a convex function, what makes it the
    optimal (least-displacement) map between the two Gaussians."""
    rng = np.random.default_rng(0)
    for k in (1, 3, 12):
        s, target = _psd(rng, k), _psd(rng, k, 2.0)
        a = tr.gaussian_transport(s, target)
        assert np.allclose(a @ s @ a.T, target, atol=1e-8)
        assert np.allclose(a, a.T, atol=1e-8)
        assert np.linalg.eigvalsh((a + a.T) / 2).min() > -1e-10
    # Equal moments: the identity, so the public images are left as they are.
    s = _psd(rng, 5)
    assert np.allclose(tr.gaussian_transport(s, s), np.eye(5), atol=1e-6)


def test_the_moments_read_back_are_the_clipped_coefficients_own():
    """unpack_moments undoes the packing of dp-eigenfaces' feature map: mean z and mean z·zᵀ."""
    from privpix.mechanisms.synthesis.dp_eigenfaces import featurizer
    from privpix.training import torch

    rng = np.random.default_rng(1)
    public = rng.random((60, 30))
    centre = public.mean(0)
    basis = np.linalg.svd(public - centre, full_matrices=False)[2][:4]
    x = rng.random((50, 30))
    phi = featurizer(centre, basis, 2.0)(torch.from_numpy(x.astype(np.float32))).double().numpy()
    first, second = tr.unpack_moments(phi.mean(0), 4)
    z = tr.clipped_coefficients(x, centre, basis, 2.0)
    assert np.allclose(first, z.mean(0), atol=1e-5)
    assert np.allclose(second, z.T @ z / len(z), atol=1e-5)


def test_without_noise_shrinkage_keeps_the_private_moments():
    rng = np.random.default_rng(2)
    k = 6
    mean, cov = rng.normal(0, 0.1, k), _psd(rng, k, 0.1)
    m, c = tr.shrink_towards(np.zeros(k), np.eye(k), mean, cov + np.outer(mean, mean), 0.0)
    assert np.allclose(m, mean) and np.allclose(c, cov)


def test_pure_noise_is_shrunk_to_the_public_moments_and_a_strong_signal_survives():
    """A private moment equal to the public one plus noise at the stated level comes back within a small fraction
    of that noise of the public one (James-Stein keeps a fraction max(0, 1 − 1/X) of it, X ~ χ²_k/k: on average
    under 20 % over the draws, never half; the covariance within a sixth of the noise matrix's spectral norm,
    2·noise·√k); a shift 30 noise units long keeps over 80 % of its length (its expected share is about 0.96,
    the noise along it 0.03). Seeded, 20 draws."""
    rng = np.random.default_rng(3)
    k, noise = 40, 0.01
    pub_mean, pub_cov = rng.normal(0, 0.1, k), _psd(rng, k, 0.1)
    kept = []
    for _ in range(20):
        e = rng.normal(0, noise, (k, k))
        sym = np.triu(e, 1) + np.triu(e, 1).T + np.diag(rng.normal(0, noise * math.sqrt(2), k))
        mean = pub_mean + rng.normal(0, noise * math.sqrt(2), k)
        second = pub_cov + np.outer(mean, mean) + sym
        m, c = tr.shrink_towards(pub_mean, pub_cov, mean, second, noise)
        kept.append(np.linalg.norm(m - pub_mean) / np.linalg.norm(mean - pub_mean))
        assert np.linalg.norm(c - pub_cov, 2) < 2 * noise * math.sqrt(k) / 6
        shift = 30 * noise * rng.normal(0, 1, k) / math.sqrt(k) * math.sqrt(2)
        m2, _ = tr.shrink_towards(pub_mean, pub_cov, pub_mean + shift + (mean - pub_mean), second, noise)
        assert (m2 - pub_mean) @ shift / (shift @ shift) > 0.8
    assert np.mean(kept) < 0.2 and max(kept) < 0.5


def test_the_generator_draws_stored_images_of_the_asked_class_and_mirrors_half():
    gen = embed_net.TransportGenerator((2, 3, 1), 5, 2)
    images = np.arange(5 * 6, dtype=np.uint8).reshape(5, 6) * 8
    gen.images.copy_(embed_net.torch.from_numpy(images))
    gen.offsets.copy_(embed_net.torch.tensor([0, 2, 5]))
    labels = np.array([0] * 200 + [1] * 200)
    out = embed_net.sample(gen, labels, seed=4)
    stored = images.astype(np.float32) / 255
    mirrored = stored.reshape(5, 2, 3)[:, :, ::-1].reshape(5, 6)
    flips = 0
    for row, y in zip(out, labels, strict=True):
        own = range(0, 2) if y == 0 else range(2, 5)
        plain = [i for i in own if np.allclose(row, stored[i])]
        flipped = [i for i in own if np.allclose(row, mirrored[i])]
        assert plain or flipped
        flips += bool(flipped) and not plain
    assert 160 < flips < 240  # Binomial(400, 1/2): outside 160..240 with probability about 6e-5
    assert np.array_equal(out, embed_net.sample(gen, labels, seed=4))
    gen.flip.fill_(False)
    assert all(any(np.allclose(r, s) for s in stored) for r in embed_net.sample(gen, labels, 5))


@pytest.fixture(scope="module")
def digits_halves():
    return load_dataset("digits:train"), load_dataset("digits:test")


def test_fit_release_and_model_file_on_digits(digits_halves, tmp_path):
    """Private digits, the other half of the set as the public one: labelled images drawn from the moved public
    ones, in the DP proportions; the model file draws the same images; the guarantee says the public images are
    in the release."""
    private, public_half = digits_halves
    folder = tmp_path / "public"
    for c in range(10):
        (folder / str(c)).mkdir(parents=True)
    from PIL import Image

    for i, (img, y) in enumerate(zip(public_half.as_uint8(), public_half.labels, strict=True)):
        Image.fromarray(img[..., 0]).save(folder / str(y) / f"{i}.png")
    mech = get_mechanism("dp-transport", 4.0, 1e-5, components=8, public=str(folder), flip=False, n=300)
    mech.fit(private, seed=0)
    rel = mech.release(private, 1)
    assert len(rel.images) == 300 and rel.images.shape == (8, 8, 1)
    counts = np.bincount(rel.images.labels, minlength=10)
    assert counts.min() > 0
    caveats = " ".join(mech.privacy(private).guarantee.caveats)
    assert "appear in the release" in caveats
    path = mech.save_model(tmp_path / "m.pt")
    again = get_mechanism("dp-transport", 4.0, 1e-5, model=str(path), n=300).fit(None)
    assert np.array_equal(again.release(private, 1).images.as_uint8(), rel.images.as_uint8())
    # Pooled matching changes every class by the same map: the released class means keep the public classes' order
    # of brightness (a class-wise map would not have to).
    pub_means = np.array([public_half.as_float()[public_half.labels == c].mean() for c in range(10)])
    rel_means = np.array([rel.images.as_float()[rel.images.labels == c].mean() for c in range(10)])
    assert np.corrcoef(pub_means, rel_means)[0, 1] > 0.8


def test_a_public_set_missing_a_private_class_is_refused(digits_halves, tmp_path):
    private, public_half = digits_halves
    folder = tmp_path / "public"
    from PIL import Image

    for i, (img, y) in enumerate(zip(public_half.as_uint8(), public_half.labels, strict=True)):
        if y < 9:
            (folder / str(y)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(img[..., 0]).save(folder / str(y) / f"{i}.png")
    mech = get_mechanism("dp-transport", 4.0, 1e-5, components=4, public=str(folder), n=10)
    with pytest.raises(ParameterError, match=r"no images of class\(es\) \['9'\]"):
        mech.fit(private, seed=0)


def test_dp_synth_picks_the_face_method_for_faces_and_dp_teacher_otherwise():
    faces = get_mechanism("dp-synth", 10.0, 1e-5, domain="faces", n=5)
    assert faces.name == "dp-transport" and faces.public == "lfw-gender-crop"
    assert get_mechanism("dp-synth", 10.0, 1e-5, domain="digits").name == "dp-teacher"
    assert get_mechanism("dp-synth", 10.0, 1e-5).name == "dp-teacher"
    # A public face set says the data are faces; the user's own public set replaces the default one.
    own = get_mechanism("dp-synth", 10.0, 1e-5, public="lfw-gender")
    assert own.name == "dp-transport" and own.public == "lfw-gender"
    assert canonical_spec("dp-synth[n=5]", "faces") == "dp-transport[public=lfw-gender-crop,n=5]"


def test_the_cropped_lfw_set_is_framed_and_credited():
    from privpix.data.loaders import DATASETS, credit, dataset_domain

    crop = load_dataset("lfw-gender-crop", size=(16, 16), pick=lambda n: np.arange(4))
    assert crop.shape == (16, 16, 3) and crop.source == "lfw-gender-crop"
    assert DATASETS["lfw-gender-crop"].domain == "faces" == dataset_domain("celeba:train")
    assert "Labeled Faces in the Wild" in credit("lfw-gender-crop")
    assert dataset_domain("mnist") == "digits" and dataset_domain("some/folder") == ""


@pytest.mark.slow(seconds=10)
def test_dp_synth_on_celeba_from_the_command_line_publishes_moved_public_faces(run, data_dir, tmp_path):
    """``privpix release --dataset celeba:… --method dp-synth``: dp-synth sees a data set of faces and publishes
    dp-transport's faces, the manifest naming the real method and the public set; at ε = 10 the released faces'
    mean is nearer the private faces' than the public faces' mean is."""
    out = tmp_path / "faces"
    r = run("release", "--dataset", "celeba:test", "--size", "16x16", "--method", "dp-synth", "--epsilon", 10,
            "--delta", 1e-5, "--param", "n=200", "--param", "components=20", "--seed", 0, "--output", out,
            "--data-dir", data_dir, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["mechanism"] == "dp-transport" and manifest["parameters"]["public"] == "lfw-gender-crop"
    assert "appear in the release" in " ".join(manifest["guarantee"]["caveats"])
    files = sorted(out.rglob("*.png"))
    assert len(files) == 200
    from PIL import Image

    released = np.mean([np.asarray(Image.open(f), dtype=np.float64) for f in files], axis=0)
    private = load_dataset("celeba:test", data_dir, size=(16, 16)).as_uint8().mean(axis=0)
    public = load_dataset("lfw-gender-crop", data_dir, size=(16, 16)).as_uint8().mean(axis=0)
    assert np.linalg.norm(released - private) < 0.7 * np.linalg.norm(public - private)


@pytest.mark.slow
def test_whole_lfw_faces_as_the_private_set_are_refused_against_their_crops(data_dir):
    """lfw-gender-crop is a crop of lfw-gender: a private set of whole LFW faces shows more than the public crops
    (which the near-copy comparison does not find), so the public set's uncropped images are checked too."""
    private = load_dataset("lfw-gender", data_dir, size=(32, 32), pick=lambda n: np.arange(60))
    mech = get_mechanism("dp-transport", 10.0, 1e-5, public="lfw-gender-crop", components=10, n=10)
    with pytest.raises(ParameterError, match=r"uncropped images, 'lfw-gender'\): 60 of the 60 private images"):
        mech.fit(private, seed=0)
