"""Data already in memory, read by index like a folder or a dataset: what the sharded release path reads when the
images (:class:`ImageSetSource`) or tabular records (:class:`RecordSetSource`) come from Python rather than from
files (the API's ``privpix.release``, the conformance suite, a loaded table). A source is pickled whole to worker
processes, so it is meant for sets that fit in memory once per worker; a large image set belongs on disk
(:func:`privpix.data.formats.open_source`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
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
        if (start, stop) == (0, len(self)) and self._images.names is not None:
            # The whole set, as a release made at once reads it: no second copy of every image.
            return self._images
        part = self._images.subset(np.arange(start, stop))
        if part.names is None:
            part = replace(part, names=np.array([f"image/{i:07d}" for i in range(start, stop)]))
        return part


class RecordSetSource:
    """``records`` (a :class:`~privpix.data.imageset.RecordSet`) as a source: ``read(a, b)`` returns records ``a`` to
    ``b - 1``; the fingerprint of a range is a digest of its rows. Records are released as one unit (the whole
    table at once), so a release reads them in one range."""

    def __init__(self, records: RecordSet, description: str | None = None) -> None:
        if not isinstance(records, RecordSet):
            raise ParameterError(f"a record source wraps a RecordSet, got {type(records).__name__}")
        self._records = records
        self.shape = (0, 0, 0)  # no image shape: the guarantee of a record release is stated per record
        self.class_names = None
        self.skipped: list[tuple[str, str]] = []
        self.description = description or f"{records.source or 'records in memory'} ({len(records):,} records)"

    def __len__(self) -> int:
        return len(self._records)

    def fingerprint_ranges(self, ranges: Sequence[tuple[int, int]]) -> str:
        columns = list(self._records.frame.columns)
        h = hashlib.sha256(f"{self.description}|{self._records.label_column}|{columns}".encode())
        for a, b in ranges:
            h.update(f"|{a}:{b}|".encode())
            import pandas as pd

            rows = pd.util.hash_pandas_object(self._records.frame.iloc[a:b], index=False)
            h.update(np.ascontiguousarray(rows.to_numpy()).tobytes())
        return h.hexdigest()

    def read(self, start: int, stop: int) -> RecordSet:
        start, stop = max(0, start), min(len(self), stop)
        if (start, stop) == (0, len(self)):
            return self._records
        return self._records.subset(np.arange(start, stop))
