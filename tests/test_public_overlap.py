"""The public-set check finds copies of public images that are not pixel for pixel the same: resized,
re-encoded, brightened or lightly cropped (privpix.data.near_copy), and flags no different face.

The faces are a 60-image sample of the staged LFW set, staged again in a temporary data folder so that
``public=lfw-gender`` reads those 60 through privpix's own loader (the measured rates over all 2,000 are in
benchmarks/results/public_overlap.md)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from PIL import Image

from privpix.data import ImageSet, load_dataset, near_copy, overlap
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.synthesis.public import load_public

N = 60


@pytest.fixture(scope="module")
def lfw(data_dir, tmp_path_factory):
    """A data folder holding 60 of the staged LFW faces (every 33rd), and those faces' rows."""
    src = data_dir / "lfw_gender_genderrecog"
    with (src / "labels_subset.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))[::33][:N]
    root = tmp_path_factory.mktemp("data")
    base = root / "lfw_gender_genderrecog"
    base.mkdir()
    with (base / "labels_subset.csv").open("w", newline="") as fh:
        out = csv.DictWriter(fh, ["path", "gender", "person"])
        out.writeheader()
        for r in rows:
            (base / r["path"]).parent.mkdir(parents=True, exist_ok=True)
            (base / r["path"]).symlink_to(src / r["path"])
            out.writerow({k: r[k] for k in ("path", "gender", "person")})
    return root, rows, [np.asarray(Image.open(src / r["path"]).convert("RGB")) for r in rows]


@pytest.fixture(scope="module")
def public(lfw):
    """The 60 faces as the mechanisms read ``public=lfw-gender`` beside 125×125 private images. Read once: resizing
    is most of the cost, and the loader keeps each resized face, so the mechanisms' own reads below are quick."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVPIX_DATA", str(lfw[0]))
        return load_public("lfw-gender", (125, 125, 3), 2, labelled=False)


@pytest.fixture
def staged(lfw, public, monkeypatch):
    monkeypatch.setenv("PRIVPIX_DATA", str(lfw[0]))
    return lfw


def _jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf).convert("RGB"))


def _celeba(data_dir, n: int = N) -> ImageSet:
    """n CelebA faces (other people, another data set) at 125×125."""
    faces = load_dataset("celeba", data_dir, pick=lambda total: np.arange(0, total, total // n)[:n], size=(125, 125))
    return ImageSet(faces.images)


def test_faces_published_downscaled_are_refused_beside_the_public_set_they_came_from(staged, data_dir):
    """The data owner's case: LFW faces downscaled to 125×125 (a pixel hash finds none of them) as the private
    set, with public=lfw-gender. The fit is refused before anything is learned, the error names the parameter
    and counts the copies, and names no image (face file names are people's names)."""
    _, rows, faces = staged
    down = np.stack([np.asarray(Image.fromarray(f).resize((125, 125), Image.Resampling.LANCZOS)) for f in faces])
    private = ImageSet(np.concatenate([down, _celeba(data_dir, 10).images]))
    mech = get_mechanism("dp-eigenfaces", epsilon=1.0, delta=1e-5, components=4, public="lfw-gender")
    with pytest.raises(ParameterError) as err:
        mech.fit(private, seed=0)
    text = str(err.value)
    assert text.startswith(f"public 'lfw-gender': {N} of the {N + 10} private images are copies of its images")
    assert f"(0 identical, {N} near copies" in text
    assert not any(r["person"] in text or r["path"] in text for r in rows)
    assert mech.basis_ is None


def test_a_cropped_reencoded_brightened_copy_is_caught(staged, public):
    """Each face cropped by a random 0-10 % of each side, brightened by 10 %, JPEG re-encoded at quality 75, as
    the mechanisms compare it: the public set resized to the private shape."""
    _, _, faces = staged
    rng = np.random.default_rng(5)
    copies = []
    for f in faces:
        h, w = f.shape[:2]
        t, b, left, r = rng.uniform(0, 0.1, 4)
        part = f[round(t * h) : h - round(b * h), round(left * w) : w - round(r * w)]
        part = np.asarray(Image.fromarray(part).resize((125, 125), Image.Resampling.BICUBIC))
        copies.append(_jpeg(np.clip(np.rint(part * 1.1), 0, 255).astype(np.uint8), 75))
    identical, near = overlap.copies(public, ImageSet(np.stack(copies)))
    assert not identical.any() and near is not None and near.all()
    _, which = near_copy.best_matches(near_copy.thumbnails(public.images), near_copy.thumbnails(np.stack(copies)))
    np.testing.assert_array_equal(which, np.arange(N))  # each found as the face it was made from


def test_different_faces_are_not_flagged(public, data_dir):
    """CelebA faces (other people) against the 60 LFW faces: none identical, none a near copy, and the check
    passes. (Over all 4,559 CelebA faces against the 2,000 LFW ones none is flagged either.)"""
    private = _celeba(data_dir)
    identical, near = overlap.copies(public, private)
    assert not identical.any() and near is not None and not near.any()
    overlap.check_distinct(public, private, "'lfw-gender'")


def test_identical_images_are_counted_as_such(public, data_dir):
    """A public image taken as it is counts as identical; with the public images' digests alone (what a fitted
    pca-inverse keeps), identical images are all that is found."""
    private = ImageSet(np.concatenate([public.images[:3], _celeba(data_dir, 2).images]))
    with pytest.raises(ParameterError, match=r"public lfw: 3 of the 5 private images are copies of its images "
                       r"\(3 identical, 0 near copies"):  # fmt: skip
        overlap.check_distinct(public, private, "lfw")
    with pytest.raises(ParameterError, match=r"public lfw: 3 private images are identical to images of it"):
        overlap.check_distinct(overlap.image_digests(public), private, "lfw")


def test_near_copies_are_not_looked_for_where_public_images_are_alike():
    """Handwritten digits: about 15 % of the UCI digits have another digit scoring 0.8 or more (faces: under
    1 %), so a near copy cannot be told from another digit written alike; only identical pixels are refused."""
    digits = load_dataset("digits")
    public, private = digits.subset(np.arange(400)), digits.subset(np.arange(1000, 1060))
    assert near_copy.bar(near_copy.thumbnails(public.images)) is None
    identical, near = overlap.copies(public, private)
    assert near is None and not identical.any()
    overlap.check_distinct(public, private, "digits")
    copied = ImageSet(np.concatenate([public.images[:2], private.images]))
    with pytest.raises(ParameterError, match=r"2 of the 62 .* \(identical pixels; near copies were not looked for"):
        overlap.check_distinct(public, copied, "digits")


def test_thumbnails_average_areas_and_ignore_brightness_and_contrast():
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (1, 32, 32)).astype(np.float32)
    big = np.kron(blocks[0], np.ones((3, 3), np.float32))[None, ..., None]  # 96×96, each value over 3×3
    np.testing.assert_allclose(near_copy.thumbnails(big), blocks, rtol=1e-5)
    # An image and its brighter, flatter copy: the same descriptor up to float rounding.
    smooth = near_copy.thumbnails(rng.random((40, 64, 64, 3)).cumsum(1).cumsum(2))
    score, which = near_copy.best_matches(smooth, 0.5 * smooth[:10] + 20)
    np.testing.assert_array_equal(which, np.arange(10))
    assert (score > 0.999).all()
