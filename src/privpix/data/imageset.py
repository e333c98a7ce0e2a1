"""Containers for the data that flows through privpix."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from privpix.errors import DataError, ParameterError

if TYPE_CHECKING:
    import pandas as pd

# Elementwise work on a whole set goes in blocks of about this many values, so temporaries stay small (a few
# tens of MB) however large the images are.
BLOCK_VALUES = 1 << 22


def blocks(shape: tuple[int, ...], size: int | None = None) -> Iterator[tuple]:
    """Index tuples that cut an ``(n, h, ...)`` array into consecutive C-order pieces of at most ``size``
    values (at least one row): whole images grouped when they are small, runs of rows of one image when it is
    large. Visiting them in order visits every value once, in the array's own order, so sequential random
    draws made block by block equal one draw over the whole array. ``size`` defaults to ``BLOCK_VALUES``."""
    size = BLOCK_VALUES if size is None else size
    n = shape[0] if shape else 0
    per_image = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    if per_image <= size:
        step = max(1, size // max(per_image, 1))
        for i in range(0, n, step):
            yield (slice(i, min(n, i + step)),)
        return
    h = shape[1]
    per_row = max(1, per_image // max(h, 1))
    rows = max(1, size // per_row)
    for i in range(n):
        for r in range(0, h, rows):
            yield (i, slice(r, min(h, r + rows)))


def _unit_float(images: np.ndarray) -> np.ndarray:
    """Stored pixels as ``ImageSet.as_float`` gives them: uint8 as float32 in [0, 1], any float array as it is."""
    if images.dtype == np.uint8:
        # In place: the same float32 division as ``astype(np.float32) / 255.0``, without a second array.
        out = images.astype(np.float32)
        np.divide(out, 255.0, out=out)
        return out
    return images


def float64_block(block: np.ndarray) -> np.ndarray:
    """A block of stored images as the float64 values ``ImageSet.as_float().astype(np.float64)`` gives."""
    return _unit_float(block).astype(np.float64)


def blockwise(images: ImageSet, fn, halo: int = 0, rows_multiple: int = 1) -> np.ndarray:
    """A per-image computation built block by block (see :func:`blocks`) straight into float32, so the float64
    temporaries stay a few tens of MB instead of copies of the whole set (with whole-set temporaries, a
    12000×12000 photo's blur peaked at 24× its decoded size). ``fn(values, index)`` maps a float64 (m, h', w, c)
    block to the same shape; ``index`` is the block's index into the set: a slice of whole images (small images,
    several at a time), or (image, rows) for a run of rows of one large image, ``rows_multiple`` rows or a multiple
    of it.

    With ``halo`` 0 the block is exactly ``index``: a per-value computation whose random draws, made block by
    block in array order, equal one draw over the whole set. A spatial filter passes its reach as ``halo``: each
    run is filtered together with that many rows of the image on either side (none past the image's own top and
    bottom, where the filter's reflection then applies as on the whole image), and only the run's rows are kept.
    For a filter whose output at a pixel reads input rows at most ``halo`` away, each line computed in the same
    order whatever its neighbours, the output is the whole-image path's bit for bit."""
    x = images.images
    out = np.empty(x.shape, np.float32)
    h = x.shape[1] if x.ndim > 1 else 0
    per_row = int(np.prod(x.shape[2:], dtype=np.int64)) if x.ndim > 2 else 1
    size = max(rows_multiple, BLOCK_VALUES // max(per_row, 1) // rows_multiple * rows_multiple) * per_row
    for b in blocks(x.shape, size):
        if isinstance(b[0], slice):
            out[b] = fn(float64_block(x[b]), b)
            continue
        i, rows = b
        lo, hi = max(0, rows.start - halo), min(h, rows.stop + halo)
        out[i, rows] = fn(float64_block(x[i : i + 1, lo:hi]), b)[0, rows.start - lo : rows.stop - lo]
    return out


@dataclass
class ImageSet:
    """A set of same-sized images with their metadata.

    Attributes:
        images: ``(n, h, w, c)`` array; uint8 (0–255) as loaded, or float32 in [0, 1] for computation.
        labels: ``(n,)`` int class per image, or ``None``.
        subjects: ``(n,)`` identity of the person per image (faces), or ``None``.
        attributes: name → ``(n,)`` array (e.g. CelebA ``Male`` as 0/1).
        names: ``(n,)`` source file (or ``dataset/index``) per image.
        source: dataset name or folder the set came from.
        class_names: optional names of the label values.
    """

    images: np.ndarray
    labels: np.ndarray | None = None
    subjects: np.ndarray | None = None
    attributes: dict[str, np.ndarray] = field(default_factory=dict)
    names: np.ndarray | None = None
    source: str = ""
    class_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        imgs = np.asarray(self.images)
        if imgs.ndim == 3:
            imgs = imgs[..., None]
        if imgs.ndim != 4:
            raise ParameterError(f"images must have shape (n, h, w, c), got {imgs.shape}")
        if imgs.dtype != np.uint8:
            imgs = imgs.astype(np.float32, copy=False)
            # Checked block by block: np.isfinite over the whole set is a bool array as large as the images.
            if any(not np.isfinite(imgs[b]).all() for b in blocks(imgs.shape)):
                raise ParameterError("images contain NaN or infinite values")
        self.images = imgs
        n = imgs.shape[0]
        for key in ("labels", "subjects", "names"):
            val = getattr(self, key)
            if val is not None:
                val = np.asarray(val)
                if val.shape != (n,):
                    raise ParameterError(f"{key} must have shape ({n},), got {val.shape}")
                setattr(self, key, val)
        if self.names is None:
            self.names = np.array([f"{self.source or 'image'}/{i:06d}" for i in range(n)])
        for k, v in self.attributes.items():
            if np.asarray(v).shape != (n,):
                raise ParameterError(f"attribute {k!r} must have shape ({n},)")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __repr__(self) -> str:
        # A summary, never the arrays or the file names: face file names are people's names, and a notebook or a
        # log prints whatever repr shows.
        parts = [f"{len(self)} images of {'x'.join(map(str, self.shape))}", str(self.images.dtype)]
        if self.labels is not None:
            n_classes = len(self.class_names) if self.class_names else len(np.unique(self.labels))
            parts.append(f"labels ({n_classes} classes)")
        if self.subjects is not None:
            parts.append(f"subjects ({len(np.unique(self.subjects))})")
        if self.attributes:
            parts.append(f"attributes {sorted(self.attributes)}")
        if self.source:
            parts.append(f"source {self.source!r}")
        return f"ImageSet({', '.join(parts)})"

    def image_names(self) -> np.ndarray:
        """``names``: optional as an argument only, since __post_init__ names every image."""
        assert self.names is not None
        return self.names

    @property
    def shape(self) -> tuple[int, int, int]:
        """(h, w, c) of one image."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def as_float(self) -> np.ndarray:
        """Images as float32 in [0, 1], shape (n, h, w, c)."""
        return _unit_float(self.images)

    def as_uint8(self) -> np.ndarray:
        """Images as uint8 0–255 (rounded, clipped)."""
        if self.images.dtype == np.uint8:
            return self.images
        out = np.empty(self.images.shape, np.uint8)
        for b in blocks(self.images.shape):
            # Per block, the same float32 steps as the whole-array expression: x·255, rint, clip, to uint8.
            t = self.images[b] * 255.0
            np.rint(t, out=t)
            np.clip(t, 0, 255, out=t)
            out[b] = t
        return out

    def flat(self) -> np.ndarray:
        """(n, h·w·c) float32 in [0, 1]."""
        return self.as_float().reshape(len(self), -1)

    def subset(self, idx: np.ndarray | Sequence[int] | slice) -> ImageSet:
        """The images at ``idx`` with their metadata."""
        if isinstance(idx, slice):
            idx = np.arange(len(self))[idx]
        idx = np.asarray(idx)
        return ImageSet(
            images=self.images[idx],
            labels=None if self.labels is None else self.labels[idx],
            subjects=None if self.subjects is None else self.subjects[idx],
            attributes={k: np.asarray(v)[idx] for k, v in self.attributes.items()},
            names=self.image_names()[idx],
            source=self.source,
            class_names=self.class_names,
        )

    def concat(self, other: ImageSet) -> ImageSet:
        """This set followed by ``other``: same image shape and class names, and the same metadata present on both
        (labels, subjects, attribute names), so no image silently loses what the other half has."""
        if other.shape != self.shape:
            raise ParameterError(f"concat: images are {self.shape} and {other.shape}")
        if other.class_names != self.class_names:
            raise ParameterError(f"concat: class names differ ({self.class_names} and {other.class_names})")
        for key in ("labels", "subjects"):
            if (getattr(self, key) is None) != (getattr(other, key) is None):
                raise ParameterError(f"concat: {key} on one set only")
        if set(self.attributes) != set(other.attributes):
            raise ParameterError(
                f"concat: attributes differ ({sorted(self.attributes)} and {sorted(other.attributes)})"
            )

        def joined(a, b):
            return None if a is None else np.concatenate([a, b])

        same = self.images.dtype == other.images.dtype  # uint8 0–255 beside float [0, 1] must not mix scales
        return ImageSet(
            images=np.concatenate([self.images, other.images] if same else [self.as_float(), other.as_float()]),
            labels=joined(self.labels, other.labels),
            subjects=joined(self.subjects, other.subjects),
            attributes={
                k: np.concatenate([np.asarray(v), np.asarray(other.attributes[k])]) for k, v in self.attributes.items()
            },
            names=np.concatenate([self.names, other.names]),
            source=self.source,
            class_names=self.class_names,
        )

    def with_images(self, images: np.ndarray) -> ImageSet:
        """The same metadata over new images (e.g. a release)."""
        if len(images) != len(self):
            raise ParameterError(f"with_images: expected {len(self)} images, got {len(images)}")
        return replace(self, images=images, attributes=dict(self.attributes))

    def batches(self, size: int) -> Iterator[ImageSet]:
        if size < 1:
            raise ParameterError(f"batch size must be >= 1, got {size}")
        for start in range(0, len(self), size):
            yield self.subset(slice(start, start + size))

    def grayscale(self) -> ImageSet:
        """Luma (ITU-R 601) single-channel copy; returns self when already one channel."""
        if self.shape[2] == 1:
            return self
        x = self.as_float()
        y = x[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        return self.with_images(y[..., None].astype(np.float32))

    def resized(self, height: int, width: int) -> ImageSet:
        """Resized copy (anti-aliased: scikit-image's resize, bit for bit, by :func:`privpix.data.resize.resize`,
        which blurs only where a shrink samples), float32 in [0, 1]."""
        from privpix.data.resize import resize

        if (height, width) == self.shape[:2]:
            return self
        # One image at a time, as as_float gives it: a float copy of the whole set first (1.9 GB for 4,096 CelebA
        # faces) took 5 of the 6 s that shrinking them did.
        out = np.empty((len(self), height, width, self.shape[2]), np.float32)
        for i, im in enumerate(self.images):
            out[i] = resize(_unit_float(im), (height, width)).reshape(height, width, -1)
        return self.with_images(out)

    def group_key(self) -> np.ndarray:
        """What a per-group split groups by: subjects if known, else labels."""
        if self.subjects is not None:
            return self.subjects
        if self.labels is not None:
            return self.labels
        raise DataError(f"{self.source}: a per-subject split needs subjects or labels")

    def split_halves(self) -> tuple[ImageSet, ImageSet]:
        """Zhang, Fu & Meng 2020's protocol: per subject (or class), the first half of its images (in dataset order,
        rounded up) train, the rest test."""
        key = self.group_key()
        train: list[int] = []
        test: list[int] = []
        import pandas as pd  # on first use: pandas takes 0.4 s to import, which image-only work never needs

        for g in pd.unique(key):
            idx = np.flatnonzero(key == g)
            k = (len(idx) + 1) // 2
            train.extend(idx[:k])
            test.extend(idx[k:])
        return self.subset(np.sort(train)), self.subset(np.sort(test))


@dataclass
class RecordSet:
    """Tabular records (UCI Adult): a DataFrame with the label and private attribute as named columns.

    ``classes``: the label column's values in order, the last one the positive class (label 1); by default the
    sorted values present. A subset keeps its parent's, so a subset holding one class only is not relabelled."""

    frame: pd.DataFrame
    label_column: str
    source: str = ""
    classes: tuple | None = None

    def __post_init__(self) -> None:
        if self.classes is None and self.label_column in self.frame:
            values = list(self.frame[self.label_column].dropna().unique())
            try:
                self.classes = tuple(sorted(values))
            except TypeError:  # mixed types: ordered by their text
                self.classes = tuple(sorted(values, key=str))

    def __len__(self) -> int:
        return len(self.frame)

    def __repr__(self) -> str:
        # A summary, never the rows: records describe people.
        where = f", source {self.source!r}" if self.source else ""
        return f"RecordSet({len(self)} records, {self.frame.shape[1]} columns, label {self.label_column!r}{where})"

    @property
    def labels(self) -> np.ndarray:
        col = self.frame[self.label_column]
        assert self.classes is not None  # __post_init__ sets them whenever the label column exists, as read above
        return (col == self.classes[-1]).to_numpy(dtype=np.int64)

    def subset(self, idx: np.ndarray) -> RecordSet:
        """The records at positions ``idx`` (renumbered from 0)."""
        frame = self.frame.iloc[np.asarray(idx)].reset_index(drop=True)
        return RecordSet(frame, self.label_column, self.source, self.classes)

    def complete(self) -> RecordSet:
        """The records without missing values."""
        return RecordSet(self.frame.dropna().reset_index(drop=True), self.label_column, self.source, self.classes)

    def one_hot(self, drop: Sequence[str] = ()) -> tuple[np.ndarray, list[str]]:
        """Features one-hot encoded (categoricals) with numerics as float; ``drop`` removes columns first.

        Returns ``(X, column_names)``. Missing categorical values become their own ``nan`` category.
        """
        df = self.frame.drop(columns=[self.label_column, *drop])
        import pandas as pd

        enc = pd.get_dummies(df, dummy_na=False, dtype=np.float32)
        return enc.to_numpy(dtype=np.float32), list(enc.columns)
