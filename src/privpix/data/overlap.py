"""The one check that a public image set is distinct from the private images it is used beside.

A mechanism that learns from a public set (a PCA basis, a generator's pretraining) adds no noise to what it takes
from it: an image that is in both sets is exposed through the public path with no protection, and the guarantee,
which covers the private set only, says nothing about it. Every mechanism that takes a public set goes through
:func:`check_distinct`. Images are compared two ways:

- identical: the SHA-256 of their 8-bit pixels at the shape the mechanism uses (the same photo read from two
  places). A fitted mechanism that keeps only these digests (pca-inverse's public basis, the LDP encoders) finds
  these only.
- near copies, when the public images themselves are at hand (the synthesizers' ``public=``): a public image
  resized, re-encoded, brightened or cropped by up to about 10 % per side (:mod:`privpix.data.near_copy`, where
  what it does not find is listed; measured in benchmarks/results/public_overlap.md).
"""

from __future__ import annotations

import hashlib

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError

# The caveat that the guarantees of the mechanisms taking a public set state of the check (the measured rates are
# in benchmarks/results/public_overlap.md).
CHECK_CAVEAT = (
    "the public set is checked against the private images when fitting: private images identical to public ones, "
    "or near copies of them (resized, re-encoded, brightened or cropped by up to 10 % per side), are refused. "
    "Measured on faces, all 22,000 such copies of LFW faces were found and none of 4,559 different CelebA faces was "
    "flagged. Mirrored, rotated or heavily edited copies are not found, and among public images that look alike, "
    "such as digits or one studio's portraits, only identical ones are. Whether a fit is refused depends on the "
    "private images and is not covered by the guarantee: a refusal says that some private image copies a public one"
)


def image_digests(images: ImageSet) -> frozenset[bytes]:
    """SHA-256 of each image's 8-bit pixels (rounded as :meth:`ImageSet.as_uint8` rounds)."""
    return frozenset(_digests(images))


def _digests(images: ImageSet) -> list[bytes]:
    return [hashlib.sha256(np.ascontiguousarray(img).tobytes()).digest() for img in images.as_uint8()]


def shared_count(public: ImageSet | frozenset[bytes], private: ImageSet) -> int:
    """How many of the ``private`` images are also in ``public`` (its images, or their :func:`image_digests`):
    identical pixels only."""
    seen = public if isinstance(public, frozenset) else image_digests(public)
    if not seen:
        return 0
    return sum(d in seen for d in _digests(private))


def copies(public: ImageSet, private: ImageSet) -> tuple[np.ndarray, np.ndarray | None]:
    """Which ``private`` images are identical to a ``public`` one, and which are near copies of one (``None``
    when none are looked for: public images alike among themselves, see :mod:`privpix.data.near_copy`)."""
    from privpix.data import near_copy

    seen = image_digests(public)
    identical = np.array([d in seen for d in _digests(private)], dtype=bool)
    if not len(public) or not len(private):
        return identical, np.zeros(len(private), dtype=bool)
    thumbs = near_copy.thumbnails(public.images)
    if near_copy.bar(thumbs) is None:  # decided by the public set alone: the private images need no thumbnails
        return identical, None
    return identical, near_copy.near_copies(thumbs, near_copy.thumbnails(private.images))


def check_distinct(public: ImageSet | frozenset[bytes], private: ImageSet, name: str) -> None:
    """Refuse ``private`` images that are copies of images of the public set ``name``: identical ones, and near
    copies when ``public`` is the images themselves (given only their :func:`image_digests`, identical ones only).
    The error counts them and names no image (face file names are people's names)."""
    if isinstance(public, frozenset):
        shared = shared_count(public, private)
        if shared:
            raise ParameterError(f"public {name}: {shared} private images are identical to images of it; {_DISTINCT}")
        return
    identical, near = copies(public, private)
    found = identical if near is None else identical | near
    n, same = int(found.sum()), int(identical.sum())
    if not n:
        _check_uncropped(public, private, name)
        return
    kinds = (
        f"{same} identical, {n - same} near copies: resized, re-encoded, brightened or lightly cropped"
        if near is not None
        else "identical pixels; near copies were not looked for, its images being too alike among themselves"
    )
    raise ParameterError(
        f"public {name}: {n} of the {len(private)} private images are copies of its images ({kinds}); {_DISTINCT}"
    )


_DISTINCT = "the public set must be distinct from the private one (they would be exposed without noise)"


def _check_uncropped(public: ImageSet, private: ImageSet, name: str) -> None:
    """A public data set that is a crop of another (``DatasetInfo.uncropped``, e.g. ``lfw-gender-crop``) is also
    checked against the whole images: a private copy of the whole image shows more than the crop, which the near-copy
    comparison (crops of the public image against the private one) does not find."""
    from privpix.data.loaders import DATASETS

    info = DATASETS.get(str(public.source or "").partition(":")[0])
    if info is None or not info.uncropped:
        return
    from privpix.data.load import load_dataset

    whole = load_dataset(info.uncropped, size=private.shape[:2])
    assert isinstance(whole, ImageSet)
    if whole.shape[2] != private.shape[2]:
        whole = whole.grayscale() if private.shape[2] == 1 else whole
    check_distinct(whole, private, f"{name} (its uncropped images, {info.uncropped!r})")


def fingerprint(data: ImageSet) -> str:
    """SHA-256 of a public set as used (pixels after resizing, then labels): what a model file records, so a
    reader can check which public set a model learned from."""
    digest = hashlib.sha256(np.ascontiguousarray(data.as_uint8()).tobytes())
    if data.labels is not None:
        digest.update(np.asarray(data.labels, dtype=np.int64).tobytes())
    return digest.hexdigest()
