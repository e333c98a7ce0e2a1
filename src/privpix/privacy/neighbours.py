"""Neighbouring relations: what two inputs that a guarantee must not tell apart differ in.

A mechanism declares its relation with :meth:`~privpix.mechanisms.Mechanism.neighbours`; the audit builds its
worst-case pairs from it and reports its wording, so a new unit is one new class here (or in a plugin), with no
edit to the audit. Pairs are worst cases where the unit allows: an all-black image against one with a white
column, pixel block or whole image (data-derived noise scales vanish on a black image), and the dataset's most
typical image against its least typical one. For mechanisms that release encoded features, :class:`OneFeature`
searches for two images whose encodings differ in exactly one feature value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError


@dataclass(frozen=True)
class NeighbourPair:
    """Two neighbouring inputs. ``a``/``b`` are ImageSets of one image (per-image units) or of a whole batch
    (dataset-level units, differing at ``index``)."""

    name: str
    a: ImageSet
    b: ImageSet
    index: int = 0


@dataclass(frozen=True)
class RecordPair:
    """Two neighbouring sets of tabular records, as :class:`NeighbourPair` for images (the audit of a mechanism
    releasing records builds them: :func:`privpix.evaluation.audit.record_pairs`)."""

    name: str
    a: RecordSet
    b: RecordSet


class Neighbours:
    """Base class of a neighbouring relation.

    Attributes:
        key: short name used in JSON (``"image"``, ``"column"``, ``"pixels"``, ``"dataset"``).
        dataset_level: whether neighbours are whole batches (the output for one image depends on the others).
        removes: whether neighbours differ by one example added or removed (add/remove), not replaced.
    """

    key: str = ""
    dataset_level: bool = False
    removes: bool = False

    def wording(self) -> str:
        """What differs between neighbours, e.g. ``"one image (replaced by any other)"``: the one text a
        guarantee's ``unit``, the audit and the report all use."""
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
            class_names=self.images.class_names,  # the class list is the data set's, whatever the pair holds
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
        return "one image (replaced by any other)"

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
        return "one pixel of one image" if self.m == 1 else f"up to {self.m} pixels of one image"

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
            return ImageSet(images=arr.astype(np.float32), labels=labels, source=images.source,
                            class_names=images.class_names)  # fmt: skip

        ids_same, ids_real = [b.lo] * n, list(range(n))
        return [
            NeighbourPair(
                "identical batch vs one image replaced", mk(same, ids_same), mk(changed, [*ids_same[:-1], b.hi]), n - 1
            ),
            NeighbourPair(
                "real batch vs one image replaced", mk(real, ids_real), mk(real_changed, [*ids_real[:-1], b.hi]), n - 1
            ),
        ]


class OneFeature(Neighbours):
    """Two images whose encodings differ in exactly one feature value: the unit of a claim made per encoded
    feature (Wang & Chang 2020's ε-LDP per feature, where each feature goes through randomized response on its own).

    ``encode`` is the mechanism's encoder, ``ImageSet -> (n, m)`` integer features (e.g.
    :meth:`privpix.mechanisms.ldp.mechanism.LDPFeatures.encode`): a pair can only be recognised by encoding it.
    ``domain`` is the number of values d of a feature, when known. :meth:`pairs` walks straight paths between
    images (one pixel of the typical image inverted, at its strongest edges and at its most saturated pixel; an
    all-black image against one white pixel at a few places; the most against the least typical image),
    encoding points along each path and narrowing every step where the encoding changes, until two inputs
    whose encodings differ in exactly one value are found. For randomized response every such pair is a worst
    case (any two values have likelihood ratio e^ε), but the audit's tests are one-sided thresholds, which
    isolate a value only at an end of the domain: pairs where one value is 0 or d − 1 are preferred, and
    oriented so that the second input holds it. Raises :class:`ParameterError` when no pair can be built from
    the images (an encoding in which no single value can change alone).
    """

    key = "feature"

    def __init__(self, encode: Callable[[ImageSet], np.ndarray], domain: int | None = None, max_pairs: int = 2) -> None:
        self.encode = encode
        self.domain = None if domain is None else int(domain)
        self.max_pairs = int(max_pairs)

    def wording(self) -> str:
        return "one encoded feature value of one image"

    def _extreme(self, v: int) -> bool:
        return v == 0 or (self.domain is not None and v == self.domain - 1)

    def pairs(self, images: ImageSet) -> list[NeighbourPair]:
        b = _Base(images)
        found: list[tuple[tuple[bool, int], NeighbourPair]] = []
        # Good enough to stop searching: an extreme value against one at least half the domain away.
        enough = (True, 1 if self.domain is None else max(1, (self.domain - 1) // 2))
        for name, (arr0, code0), (arr1, code1), j in self._search(b, list(self._paths(b)), enough):
            v0, v1 = int(code0[j]), int(code1[j])
            # The second input holds the extreme value, so a one-sided threshold isolates it.
            if not self._extreme(v1) and (self._extreme(v0) or v0 < v1):
                (arr0, v0), (arr1, v1) = (arr1, v1), (arr0, v0)
            pair = NeighbourPair(f"{name}: feature {j} is {v0} vs {v1}", b.one(arr0), b.one(arr1))
            found.append(((self._extreme(v1), abs(v0 - v1)), pair))
        if not found:
            raise ParameterError(
                "audit: no two inputs whose encodings differ in exactly one feature value could be built from "
                "these images; audit the per-image unit (unit=image) instead"
            )
        # Extreme values first, then the largest change (a test on the mean sees it best); one pair per path.
        found.sort(key=lambda t: (not t[0][0], -t[0][1]))
        out: list[NeighbourPair] = []
        for _, pair in found:
            if len(out) < self.max_pairs and all(pair.name.split(":")[0] != q.name.split(":")[0] for q in out):
                out.append(pair)
        return out or [found[0][1]]

    @staticmethod
    def _paths(b: _Base):
        """(name, start, end) of the segments searched, most promising first."""
        h, w = b.x.shape[1:3]
        grey = b.typical.mean(axis=2)
        gy, gx = np.gradient(grey)
        edges = np.argsort(-(np.hypot(gy, gx)).ravel(), kind="stable")[:6]
        saturated = int(np.argmax(np.abs(1.0 - 2.0 * grey) * (np.hypot(gy, gx) > 0)))
        for k in dict.fromkeys([*map(int, edges), saturated]):
            y, x = np.unravel_index(k, (h, w))
            flipped = b.typical.copy()
            flipped[y, x, :] = 1.0 - flipped[y, x, :]
            yield f"typical image vs pixel ({y}, {x}) inverted", b.typical, flipped
        for y, x in dict.fromkeys([(h // 2, w // 2), (h // 3, w // 3), (h // 2, w // 3), (h // 3, w // 2)]):
            white = b.black.copy()
            white[y, x, :] = 1.0
            yield f"black image vs white pixel ({y}, {x})", b.black, white
        yield "most vs least typical image", b.typical, b.x[b.hi]

    def _codes(self, b: _Base, arrs: np.ndarray) -> np.ndarray:
        labels = None if b.images.labels is None else np.repeat(b.images.labels[b.lo], len(arrs))
        batch = ImageSet(images=arrs.astype(np.float32), labels=labels, source=b.images.source,
                         class_names=b.images.class_names)  # fmt: skip
        return np.asarray(self.encode(batch)).astype(np.int64)

    def _score(self, a: int, c: int) -> tuple[bool, int]:
        return (self._extreme(a) or self._extreme(c), abs(a - c))

    def _search(self, b: _Base, paths: list, enough: tuple[bool, int], rounds: int = 8, split: int = 8, keep: int = 64):
        """Single-value changes along the segments ``paths`` ((name, x0, x1), each from x0 to x1), as
        (name, (array, code), (array, code), feature index). All segments are narrowed together, a round at a
        time (``keep`` steps, the fewest differing values first, each cut in ``split``), until ``max_pairs``
        changes scoring ``enough`` are found (or, from the third round, ``max_pairs`` with an extreme value), or
        ``rounds`` have passed: at most ``rounds · keep · (split − 1)``
        encodings."""

        def point(k: int, t: float) -> np.ndarray:
            _, x0, x1 = paths[k]
            return np.clip((1.0 - t) * x0 + t * x1, 0.0, 1.0).astype(np.float32)

        ends = self._codes(b, np.stack([point(k, t) for k in range(len(paths)) for t in (0.0, 1.0)]))
        # Steps (path, t0, code0, t1, code1) over which the encoding changes.
        steps = [(k, 0.0, ends[2 * k], 1.0, ends[2 * k + 1]) for k in range(len(paths))]
        hits = []
        for r in range(rounds + 1):
            rest = []
            for k, t0, a, t1, c in steps:
                diff = np.flatnonzero(a != c)
                if len(diff) == 1:
                    j = int(diff[0])
                    hits.append((self._score(int(a[j]), int(c[j])), k, (point(k, t0), a), (point(k, t1), c), j))
                elif len(diff) > 1:
                    rest.append((k, t0, a, t1, c))
            good = {k for score, k, *_ in hits if score >= enough}
            extreme = {k for score, k, *_ in hits if score[0]}
            # Enough good pairs; or, after two more rounds looking for larger changes, enough extreme ones.
            if len(good) >= self.max_pairs or (r >= 2 and len(extreme) >= self.max_pairs) or not rest or r == rounds:
                break
            rest.sort(key=lambda st: (st[0] in good, int(np.sum(st[2] != st[4]))))
            rest = rest[:keep]
            ts = [np.linspace(t0, t1, split + 1)[1:-1] for _, t0, _, t1, _ in rest]
            codes = self._codes(b, np.stack([point(st[0], t) for st, row in zip(rest, ts, strict=True) for t in row]))
            steps, i = [], 0
            for (k, t0, a, t1, c), row in zip(rest, ts, strict=True):
                grid_t, grid_c = [t0, *row, t1], [a, *codes[i : i + len(row)], c]
                i += len(row)
                steps += [(k, grid_t[n], grid_c[n], grid_t[n + 1], grid_c[n + 1]) for n in range(len(grid_t) - 1)]
        return [(paths[k][0], lo, hi, j) for _, k, lo, hi, j in hits]
