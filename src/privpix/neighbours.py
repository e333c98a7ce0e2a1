"""Neighbouring relations: what two inputs that a guarantee must not tell apart differ in.

A mechanism declares its relation with :meth:`~privpix.mechanisms.Mechanism.neighbours`; the audit builds its
worst-case pairs from it and reports its wording, so a new unit is one new class here (or in a plugin), with no
edit to the audit. Pairs are worst cases where the unit allows: an all-black image against one with a white
column, pixel block or whole image (data-derived noise scales vanish on a black image), and the dataset's most
typical image against its least typical one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError


@dataclass(frozen=True)
class NeighbourPair:
    """Two neighbouring inputs. ``a``/``b`` are ImageSets of one image (per-image units) or of a whole batch
    (dataset-level units, differing at ``index``)."""

    name: str
    a: ImageSet
    b: ImageSet
    index: int = 0


class Neighbours:
    """Base class of a neighbouring relation.

    Attributes:
        key: short name used in JSON (``"image"``, ``"column"``, ``"pixels"``, ``"dataset"``).
        dataset_level: whether neighbours are whole batches (the output for one image depends on the others).
    """

    key: str = ""
    dataset_level: bool = False

    def wording(self) -> str:
        """How reports and audits say what differs, e.g. ``"one image replaced"``."""
        raise NotImplementedError

    def pairs(self, images: ImageSet) -> list[NeighbourPair]:
        """Candidate worst-case pairs built from ``images`` (at least 2)."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class _Base:
    """What every per-image pair builder needs from the images: the typical and least typical image."""

    def __init__(self, images: ImageSet) -> None:
        x = images.as_float()
        if len(x) < 2:
            raise ParameterError("audit needs at least 2 images to build neighbour pairs")
        self.images, self.x = images, x
        self.lo, self.hi = _typical(x)
        self.typical = x[self.lo]
        self.black = np.zeros_like(self.typical)

    def one(self, arr: np.ndarray, index: int | None = None) -> ImageSet:
        # Class-conditional mechanisms (ACGAN) need labels: a synthetic image takes the typical image's.
        labels = self.images.labels
        label = None if labels is None else labels[self.lo if index is None else index]
        return ImageSet(
            images=arr[None].astype(np.float32),
            labels=None if label is None else np.asarray([label]),
            source=self.images.source,
        )


def _typical(images: np.ndarray) -> tuple[int, int]:
    """Indices of the image closest to and farthest from the mean image."""
    flat = images.reshape(len(images), -1)
    d = np.linalg.norm(flat - flat.mean(axis=0), axis=1)
    return int(np.argmin(d)), int(np.argmax(d))


class OneImage(Neighbours):
    """One image replaced by any other."""

    key = "image"

    def wording(self) -> str:
        return "one image replaced"

    def pairs(self, images: ImageSet) -> list[NeighbourPair]:
        b = _Base(images)
        return [
            NeighbourPair("black vs white image", b.one(b.black), b.one(np.ones_like(b.typical))),
            NeighbourPair("most vs least typical image", b.one(b.typical), b.one(b.x[b.hi], b.hi)),
        ]


class PixelColumn(Neighbours):
    """One pixel column of one image changed arbitrarily."""

    key = "column"

    def wording(self) -> str:
        return "one pixel column of one image"

    def pairs(self, images: ImageSet) -> list[NeighbourPair]:
        b = _Base(images)
        col = int(np.argmax(np.abs(1.0 - 2.0 * b.typical).sum(axis=(0, 2))))
        white_col, flipped = b.black.copy(), b.typical.copy()
        white_col[:, 0, :] = 1.0
        flipped[:, col, :] = 1.0 - flipped[:, col, :]
        return [
            NeighbourPair("black vs one white column", b.one(b.black), b.one(white_col)),
            NeighbourPair("typical vs one column inverted", b.one(b.typical), b.one(flipped)),
        ]


class Pixels(Neighbours):
    """Up to ``m`` pixels (all their channels) of one image changed arbitrarily."""

    key = "pixels"

    def __init__(self, m: int = 1) -> None:
        self.m = int(m)

    def wording(self) -> str:
        return f"{self.m} pixel(s) of one image"

    def pairs(self, images: ImageSet) -> list[NeighbourPair]:
        b = _Base(images)
        h, w = b.x.shape[1:3]
        # m pixels in raster order inside the top-left block: for cell-averaging mechanisms they share a cell.
        side = max(1, math.ceil(math.sqrt(self.m)))
        ys, xs = np.unravel_index(np.arange(min(self.m, h * w)), (min(side, h), max(1, min(side, w))))
        white_px, flipped = b.black.copy(), b.typical.copy()
        white_px[ys, xs, :] = 1.0
        flipped[ys, xs, :] = 1.0 - flipped[ys, xs, :]
        return [
            NeighbourPair(f"black vs {self.m} white pixel(s)", b.one(b.black), b.one(white_px)),
            NeighbourPair(f"typical vs {self.m} pixel(s) inverted", b.one(b.typical), b.one(flipped)),
        ]


class OneOfBatch(Neighbours):
    """Two batches of ``batch_size`` images (all of them, when ``None``) that differ in one image: the relation
    of mechanisms whose output for one image depends on the others of its batch."""

    key = "dataset"
    dataset_level = True

    def __init__(self, batch_size: int | None = None) -> None:
        self.batch_size = batch_size

    def wording(self) -> str:
        return "one image of the dataset replaced"

    def pairs(self, images: ImageSet) -> list[NeighbourPair]:
        b = _Base(images)
        x = b.x
        n = min(len(x), self.batch_size or len(x))
        if n < 2:
            raise ParameterError("audit: a dataset-level audit needs at least 2 images")
        same = np.repeat(b.typical[None], n, axis=0)
        changed = same.copy()
        changed[-1] = x[b.hi]
        real = x[:n].copy()
        real_changed = real.copy()
        real_changed[-1] = x[b.hi] if b.hi >= n else b.black

        def mk(arr: np.ndarray, idx: list[int]) -> ImageSet:
            labels = None if images.labels is None else np.asarray([images.labels[i] for i in idx])
            return ImageSet(images=arr.astype(np.float32), labels=labels, source=images.source)

        ids_same, ids_real = [b.lo] * n, list(range(n))
        return [
            NeighbourPair(
                "identical batch vs one image replaced", mk(same, ids_same), mk(changed, [*ids_same[:-1], b.hi]), n - 1
            ),
            NeighbourPair(
                "real batch vs one image replaced", mk(real, ids_real), mk(real_changed, [*ids_real[:-1], b.hi]), n - 1
            ),
        ]
