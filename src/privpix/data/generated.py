"""An image source that makes its images on the fly: load tests of a release at any size, with no files.

Image ``i`` is a smooth random pattern drawn from ``SeedSequence(seed, spawn_key=(i,))``: the same index gives the
same image in any process, so a generated source behaves like a dataset on disk (``read(a, b)`` by index, picklable,
nothing held in memory) and a million-image release can be measured without a million files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError


@dataclass(frozen=True)
class GeneratedSource:
    """``n`` generated uint8 images of ``shape`` (h, w, c), labelled by ``i % classes``."""

    n: int
    shape: tuple[int, int, int] = (64, 64, 3)
    seed: int = 0
    classes: int = 10
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.n < 1 or len(self.shape) != 3 or min(self.shape) < 1 or self.shape[2] not in (1, 3):
            raise ParameterError(
                f"a generated source needs n >= 1 and a (h, w, 1 or 3) shape, got {self.n}, {self.shape}"
            )

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(f"class{k}" for k in range(self.classes))

    @property
    def description(self) -> str:
        h, w, c = self.shape
        return f"generated ({self.n:,} images of {h}x{w}x{c}, seed {self.seed})"

    def __len__(self) -> int:
        return self.n

    def fingerprint(self, start: int = 0, stop: int | None = None) -> str:
        """Generated images depend on the seed, shape and index alone."""
        return self.fingerprint_ranges([(start, self.n if stop is None else stop)])

    def fingerprint_ranges(self, ranges: Sequence[tuple[int, int]]) -> str:
        return f"{self.description}|" + ",".join(f"{a}:{b}" for a, b in ranges)

    def read(self, start: int, stop: int) -> ImageSet:
        start, stop = max(0, start), min(self.n, stop)
        h, w, c = self.shape
        out = np.empty((stop - start, h, w, c), np.uint8)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        for j, i in enumerate(range(start, stop)):
            r = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(i,)))
            f = r.uniform(0.02, 0.2, size=(c, 2)).astype(np.float32)
            p = r.uniform(0, 2 * np.pi, size=(c, 1, 1)).astype(np.float32)
            wave = np.sin(f[:, 0, None, None] * yy + f[:, 1, None, None] * xx + p)
            out[j] = np.moveaxis((127.5 + 100 * wave + r.normal(0, 8, (c, h, w))).clip(0, 255), 0, -1)
        idx = np.arange(start, stop)
        names = np.array([f"generated/{i:07d}" for i in idx])
        return ImageSet(out, labels=idx % self.classes, names=names, source="generated", class_names=self.class_names)
