"""The one check that a public image set is distinct from the private images it is used beside.

A mechanism that learns from a public set (a PCA basis, a generator's pretraining) adds no noise to what it takes
from it: an image that is in both sets is exposed through the public path with no protection, and the guarantee,
which covers the private set only, says nothing about it. Every mechanism that takes a public set goes through
:func:`check_distinct`: images are compared by the SHA-256 of their 8-bit pixels at the shape the mechanism uses
(so the same photo read from two places is found; a re-encoded or re-cropped copy is not, see docs/accounting.md).
"""

from __future__ import annotations

import hashlib

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError


def image_digests(images: ImageSet) -> frozenset[bytes]:
    """SHA-256 of each image's 8-bit pixels (rounded as :meth:`ImageSet.as_uint8` rounds)."""
    return frozenset(hashlib.sha256(np.ascontiguousarray(img).tobytes()).digest() for img in images.as_uint8())


def shared_count(public: ImageSet | frozenset[bytes], private: ImageSet) -> int:
    """How many of the ``private`` images are also in ``public`` (its images, or their :func:`image_digests`)."""
    seen = public if isinstance(public, frozenset) else image_digests(public)
    if not seen:
        return 0
    return sum(hashlib.sha256(np.ascontiguousarray(img).tobytes()).digest() in seen for img in private.as_uint8())


def check_distinct(public: ImageSet | frozenset[bytes], private: ImageSet, name: str) -> None:
    """Refuse ``private`` images that are also in the public set ``name`` (its images, or their
    :func:`image_digests`), compared at the private images' shape."""
    shared = shared_count(public, private)
    if shared:
        size = f" of its {len(public)}" if isinstance(public, ImageSet) else ""
        raise ParameterError(
            f"public {name}: {shared}{size} images are also in the private set; the public set must be distinct from "
            "the private one (they would be exposed without noise)"
        )


def fingerprint(data: ImageSet) -> str:
    """SHA-256 of a public set as used (pixels after resizing, then labels): what a model file records, so a
    reader can check which public set a model learned from."""
    digest = hashlib.sha256(np.ascontiguousarray(data.as_uint8()).tobytes())
    if data.labels is not None:
        digest.update(np.asarray(data.labels, dtype=np.int64).tobytes())
    return digest.hexdigest()
