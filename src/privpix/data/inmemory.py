"""An :class:`~privpix.data.imageset.ImageSet` already in memory, read by index like a folder or a dataset: what
the sharded release path reads when the images come from Python rather than from files (the conformance suite,
a script's own arrays). It is pickled whole to worker processes, so it is meant for sets that fit in memory once
per worker; a large set belongs on disk (:func:`privpix.data.formats.open_source`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError


class ImageSetSource:
    """``images`` as an image source: ``read(a, b)`` returns images ``a`` to ``b - 1`` with their labels and names;
    the fingerprint of a range is a digest of its pixels (there are no files to stat)."""

    def __init__(self, images: ImageSet, description: str | None = None) -> None:
        if not isinstance(images, ImageSet):
            raise ParameterError(f"an image source wraps an ImageSet, got {type(images).__name__}")
        self._images = images
        self.shape = images.shape
        self.class_names = images.class_names
        self.skipped: list[tuple[str, str]] = []
        self.description = description or f"{images.source or 'images in memory'} ({len(images):,} images)"

    def __len__(self) -> int:
        return len(self._images)

    def fingerprint(self, start: int = 0, stop: int | None = None) -> str:
        return self.fingerprint_ranges([(start, len(self) if stop is None else stop)])

    def fingerprint_ranges(self, ranges: Sequence[tuple[int, int]]) -> str:
        h = hashlib.sha256(f"{self.description}|{self.class_names}|{self.shape}".encode())
        for a, b in ranges:
            h.update(f"|{a}:{b}|".encode())
            h.update(np.ascontiguousarray(self._images.images[a:b]).tobytes())
        return h.hexdigest()

    def read(self, start: int, stop: int) -> ImageSet:
        start, stop = max(0, start), min(len(self), stop)
        part = self._images.subset(np.arange(start, stop))
        if part.names is None:
            part = replace(part, names=np.array([f"image/{i:07d}" for i in range(start, stop)]))
        return part
