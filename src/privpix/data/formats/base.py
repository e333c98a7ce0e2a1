"""What every format shares: the released item, shard results, the checks on keys, labels and class names,
and the reading side's base (:class:`ImageSource`, header checks, decoding of bytes held in a container)."""

from __future__ import annotations

import hashlib
import io
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from privpix.data.files import (
    DECODE_ERRORS,
    checked_size,
    decode_opened,
    is_grey,
    one_line,
    pillow_limit,
)
from privpix.data.imageset import ImageSet
from privpix.data.resize import resize
from privpix.errors import DataError, ParameterError

FORMATS = ("imagefolder", "parquet", "webdataset")

METADATA = "metadata.jsonl"
"""The ImageFolder index (Hugging Face's name): one JSON object per image, in release order."""

# Rows per Parquet row group: Hugging Face's own choice for image datasets. A read of an index range decodes only
# the row groups it overlaps, so this is also the granularity of random access.
PARQUET_ROW_GROUP = 100

_KEY = re.compile(r"[0-9a-f]{1,64}")
# Hugging Face's data-file resolution takes a folder named like this for a split (datasets.data_files
# SPLIT_KEYWORDS with NON_WORDS_CHARS around them; case-sensitive): `load_dataset("imagefolder", data_dir=...)`
# would then load only that folder's images, silently.
_HF_SPLIT_NAME = re.compile(
    r"(?:.*[-._ 0-9])?(?:train|training|validation|valid|dev|val|test|testing|eval|evaluation)(?:[-._ 0-9].*)?",
    re.DOTALL,
)


# ================================================================================================== writing


@dataclass(frozen=True)
class Item:
    """One released image.

    Attributes:
        key: the file stem, unique in the release: lowercase hex (1–64 digits), e.g. ``"3fa8c0d1e2b4a697"``.
        image: ``(h, w, c)`` uint8, ``c`` 1 (grey) or 3 (RGB).
        label: the class name, or ``None`` when the release has no labels.
    """

    key: str
    image: np.ndarray
    label: str | None


@dataclass
class Written:
    """What :func:`write_shard` wrote.

    Attributes:
        files: ``(relative posix path inside the release folder, sha256 hex)`` of every file written, the hash
            taken of the bytes written to disk.
        rows: one JSON-serialisable row per item, in item order, for :func:`finish`: ``file_name`` (the file
            holding the image), ``label`` (absent when unlabelled), and for parquet / webdataset the ``key``.
    """

    files: list[tuple[str, str]]
    rows: list[dict]


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`, else :class:`ParameterError`."""
    if fmt not in FORMATS:
        raise ParameterError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def check_class_names(fmt: str, class_names: Sequence[str] | None) -> tuple[str, ...] | None:
    """The class names as a tuple, refused (:class:`ParameterError`) if :func:`write_shard` would refuse one.

    Call it before starting the workers, so a bad name stops the release before any work. Every format needs
    distinct non-empty strings. ``imagefolder`` writes them as folder names, so it also refuses: ``/``, ``\\``,
    control characters, a leading ``.`` (hidden: skipped by readers) or ``__`` (ignored by Hugging Face), over
    255 bytes, and names Hugging Face takes for a split (``train``, ``test``, ``val``, ``dev``, ``eval`` ...,
    alone or next to ``-._`` / space / digits, e.g. ``test``, ``x-val``, ``train_2``): ``load_dataset(
    "imagefolder", data_dir=...)`` would load that folder alone as a split.
    """
    check_format(fmt)
    if class_names is None:
        return None
    names = tuple(class_names)
    if len(set(names)) != len(names):
        raise ParameterError(f"class names must be distinct, got {list(names)!r}")
    for name in names:
        _check_label(fmt, name)
    return names


def _check_label(fmt: str, label: Any) -> None:
    if not isinstance(label, str) or not label:
        raise ParameterError(f"label must be a non-empty string (the class name) or None, got {label!r}")
    if fmt != "imagefolder":
        return
    bad = (
        "/" in label
        or "\\" in label
        or any(ord(c) < 32 or ord(c) == 127 for c in label)
        or label.startswith(".")
        or label.startswith("__")
        or len(label.encode("utf-8")) > 255
    )
    if bad:
        raise ParameterError(
            f"label {label!r} cannot be an imagefolder class folder (no '/', '\\', control characters, leading "
            "'.' or '__', at most 255 bytes)"
        )
    if _HF_SPLIT_NAME.fullmatch(label):
        raise ParameterError(
            f"label {label!r}: Hugging Face's imagefolder loader takes a folder named like this for a split "
            "(train/test/val/dev/eval...) and would load only its images; rename the class, or use format "
            "'parquet' or 'webdataset'"
        )


def check_items(fmt: str, items: Sequence[Item], class_names: tuple[str, ...] | None) -> bool:
    """Validate every item; return whether the shard is labelled."""
    keys: set[str] = set()
    labelled = None
    known = set(class_names) if class_names is not None else None
    for it in items:
        if not isinstance(it, Item):
            raise ParameterError(f"items must be Item objects, got {type(it).__name__}")
        if not isinstance(it.key, str) or not _KEY.fullmatch(it.key):
            raise ParameterError(f"item key must be 1 to 64 lowercase hex digits, got {it.key!r}")
        if it.key in keys:
            raise ParameterError(f"item key {it.key!r} appears twice in the shard")
        keys.add(it.key)
        img = it.image
        if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] not in (1, 3):
            got = f"{img.dtype} {img.shape}" if isinstance(img, np.ndarray) else type(img).__name__
            raise ParameterError(f"item {it.key}: image must be uint8 (h, w, c) with c 1 or 3, got {got}")
        if img.shape[0] < 1 or img.shape[1] < 1:
            raise ParameterError(f"item {it.key}: image is empty ({img.shape})")
        has = it.label is not None
        if labelled is None:
            labelled = has
        elif labelled != has:
            raise ParameterError(f"item {it.key}: every item of a release has a label, or none has")
        if known is not None and not has:
            raise ParameterError(f"item {it.key}: has no label, but class names were given")
        if has:
            _check_label(fmt, it.label)
            if known is not None and it.label not in known:
                raise ParameterError(f"item {it.key}: label {it.label!r} is not one of the class names")
    return bool(labelled) if labelled is not None else class_names is not None


# ================================================================================================== reading


@contextmanager
def _open_bytes(data: bytes, name: str, max_pixels: int | None) -> Iterator[Image.Image]:
    """:func:`privpix.data.files.open_image` for an image held in memory (a Parquet cell, a tar member): the same
    header check against ``max_pixels`` before decoding, the same one-line errors, naming ``name``."""
    with pillow_limit(None):
        try:
            im: Image.Image = Image.open(io.BytesIO(data))
        except DECODE_ERRORS as exc:
            raise DataError(f"{name}: not a readable image ({one_line(exc)})") from None
    with checked_size(im, name, max_pixels) as im:
        yield im


def _probe_bytes(data: bytes, name: str, max_pixels: int | None) -> tuple[int, int, bool]:
    """(width, height, grey by header) of an in-memory image, nothing decoded."""
    with _open_bytes(data, name, max_pixels) as im:
        try:
            return im.size[0], im.size[1], is_grey(im)
        except DECODE_ERRORS as exc:
            raise DataError(f"{name}: not a readable image ({one_line(exc)})") from None


def decode_bytes(data: bytes, name: str, mode: str, max_pixels: int | None) -> np.ndarray:
    """An in-memory image as uint8 ``(h, w, c)`` in ``mode``, decoded exactly as
    :func:`privpix.data.files.read_image` decodes a file (docs/decoding.md)."""
    with _open_bytes(data, name, max_pixels) as im:
        return decode_opened(im, mode, name)


def size_mismatch(name: str, shape: tuple[int, ...], first: str, expected: tuple[int, ...]) -> DataError:
    """An image whose size differs from the first image's; shapes are (h, w[, c]), shown as WxH[xC]."""

    def show(s: tuple[int, ...]) -> str:
        return "x".join(str(v) for v in (s[1], s[0], *s[2:]))

    return DataError(
        f"{name}: image is {show(shape)}, but {first} is {show(expected)}; resize every image to one size with "
        "--size HxW (from Python: size=(height, width))"
    )


class ImageSource:
    """Images read by index range from files on disk; picklable and small (paths and indexes, never pixels), so
    it can be sent to worker processes or Dask workers, each reading its own range.

    Attributes:
        shape: ``(h, w, c)`` of every image :meth:`read` returns (after the resize, if any).
        class_names: the names of the label values, or ``None`` when the source has no labels.
        skipped: ``(path, reason)`` of every file passed over (folders), otherwise empty.
        description: one line for messages and manifests, e.g. ``"folder /x (4,559 images)"``.
    """

    shape: tuple[int, int, int]
    class_names: tuple[str, ...] | None
    skipped: list[tuple[str, str]]
    description: str

    def __init__(self) -> None:
        self.skipped = []
        self.class_names = None
        self._labels: np.ndarray | None = None
        self._size: tuple[int, int] | None = None
        self._n = 0
        self._source = ""
        self._first = ""

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description}>"

    def fingerprint(self, start: int = 0, stop: int | None = None) -> str:
        """A digest of what the source reads for images ``start`` to ``stop - 1``: its description, classes and
        shape, and the name, size and modification time of every file those images come from (a stat each, no
        reading). A resumed release keeps a finished shard only if its fingerprint is unchanged, so a file replaced
        one for one is read again, not mixed with the interrupted run's work."""
        return self.fingerprint_ranges([(start, self._n if stop is None else stop)])

    def fingerprint_ranges(self, ranges: Sequence[tuple[int, int]]) -> str:
        """:meth:`fingerprint` of several ranges at once (a shard's blocks): each file the ranges read is
        stat'ed once, however many ranges share it (a few container files serve every block)."""
        spans = ",".join(f"{a}:{b}" for a, b in ranges)
        h = hashlib.sha256(f"{self.description}|{self.class_names}|{self.shape}|{spans}".encode())
        for path in dict.fromkeys(p for a, b in ranges for p in self._paths(a, b)):
            st = os.stat(path)
            h.update(f"\0{path}\0{st.st_size}\0{st.st_mtime_ns}".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def _paths(self, start: int, stop: int) -> list[str]:
        """The files images ``start`` to ``stop - 1`` are read from (absolute paths), for :meth:`fingerprint`."""
        return []

    def read(self, start: int, stop: int) -> ImageSet:
        """Images ``start`` to ``stop - 1`` (``0 <= start <= stop <= len(self)``) as an :class:`ImageSet`: uint8
        ``(n, h, w, c)``, ``labels`` as indexes into ``class_names`` (or ``None``), ``names`` relative to the
        source (a file path, ``"file.parquet#row"``, ``"shard.tar#key"``). Raises :class:`DataError` naming the
        item for an image that cannot be decoded or whose size differs from :attr:`shape`."""
        for v in (start, stop):
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise ParameterError(f"read: start and stop must be integers, got {start!r}, {stop!r}")
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self._n:
            raise ParameterError(f"read: need 0 <= start <= stop <= {self._n}, got {start}, {stop}")
        images = np.empty((stop - start, *self.shape), np.uint8)
        names = self._fill(images, start, stop)
        labels = None if self._labels is None else self._labels[start:stop].astype(np.int64)
        return ImageSet(
            images,
            labels=labels,
            names=np.array(names, dtype=str),
            source=self._source,
            class_names=self.class_names,
            **self._extras(start, stop),
        )

    # -- for subclasses

    def _fill(self, out: np.ndarray, start: int, stop: int) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _extras(self, start: int, stop: int) -> dict[str, Any]:
        return {}

    def _put(self, out: np.ndarray, i: int, img: np.ndarray, name: str, work: type[np.floating] = np.float32) -> None:
        """Resize (when asked, in ``work``: :func:`privpix.data.resize.resize`) and store one decoded image, refusing
        one whose shape differs."""
        if self._size is not None:
            img = resize(img, self._size, work=work)
        if img.shape != out.shape[1:]:
            raise size_mismatch(name, img.shape, self._first, self.shape)
        out[i] = img


class Headers:
    """The one pass over every image header at open: the colour mode is decided over all of them (as for
    folders), and sizes and ``max_pixels`` are checked before any worker starts. Keeps O(1) state."""

    def __init__(self, size: tuple[int, int] | None, max_pixels: int | None) -> None:
        self.size = size
        self.max_pixels = max_pixels
        self.grey = True
        self.first: tuple[str, bytes, int, int] | None = None  # name, bytes, width, height

    def add(self, data: bytes, name: str) -> None:
        w, h, grey = _probe_bytes(data, name, self.max_pixels)
        self.grey = self.grey and grey
        if self.first is None:
            self.first = (name, data, w, h)
        elif self.size is None and (w, h) != self.first[2:]:
            raise size_mismatch(name, (h, w), self.first[0], (self.first[3], self.first[2]))

    def mode_and_shape(self) -> tuple[str, tuple[int, int, int]]:
        assert self.first is not None
        mode = "L" if self.grey else "RGB"
        if self.size is not None:
            return mode, (*self.size, 1 if mode == "L" else 3)
        # Decoded, not from the header: an EXIF orientation swaps width and height.
        img = decode_bytes(self.first[1], self.first[0], mode, self.max_pixels)
        return mode, img.shape  # type: ignore[return-value]


def pack_names(names: Sequence[str]) -> bytes:
    """Names as one compressed blob: a source is pickled to every task, and a folder's paths share long
    prefixes. NUL cannot occur in a file name or a tar member name."""
    return zlib.compress("\0".join(names).encode("utf-8", "surrogateescape"), 1)


def unpack_names(blob: bytes, n: int) -> list[str]:
    """The ``n`` names :func:`pack_names` packed into ``blob``."""
    if n == 0:
        return []
    return zlib.decompress(blob).decode("utf-8", "surrogateescape").split("\0")


def labels_array(values: Sequence[int] | np.ndarray) -> np.ndarray:
    """Label indexes in the smallest integer type that holds them."""
    # The smallest integer type: a source (with its labels) is pickled to every worker.
    arr = np.asarray(values, dtype=np.int64)
    if arr.size == 0:
        return arr.astype(np.int32)
    return arr.astype(np.min_scalar_type(-max(1, int(arr.max()) + 1)))


class ContainerSource(ImageSource):
    """Images held inside a few container files (Parquet, tar): the decoding settings both keep, and the files a
    fingerprint covers."""

    def __init__(
        self,
        files: list[tuple[str, str]],
        *,
        mode: str,
        size: tuple[int, int] | None,
        max_pixels: int | None,
        labels: np.ndarray | None,
        class_names: tuple[str, ...] | None,
        shape: tuple[int, int, int],
        first: str,
        source: str,
        description: str,
    ) -> None:
        super().__init__()
        self._files = files  # (absolute path, name relative to the source)
        self._mode = mode
        self._size = size
        self._max_pixels = max_pixels
        self._labels = labels
        self.class_names = class_names
        self.shape = shape
        self._first = first
        self._source = source
        self.description = description

    def _paths(self, start: int, stop: int) -> list[str]:
        return [path for path, _ in self._files]  # a few files: all of them


def encode_labels(
    raw: list[Any], class_names: tuple[str, ...] | None, label_type: Any, where: Path
) -> tuple[np.ndarray | None, tuple[str, ...] | None]:
    """Labels as indexes into class names: integers keep their values (names from ``class_names`` when given,
    else ``"0"``, ``"1"``, ...); strings become indexes into their sorted set."""
    if all(v is None for v in raw):
        return None, None
    if any(v is None for v in raw):
        i = next(k for k, v in enumerate(raw) if v is None)
        raise DataError(f"{where}: item {i} has no label while others have one; label every image or none")
    if all(isinstance(v, str) for v in raw):
        names = tuple(sorted(set(raw)))
        index = {n: i for i, n in enumerate(names)}
        return labels_array([index[v] for v in raw]), names
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in raw):
        vals = np.asarray(raw, dtype=np.int64)
        if vals.min() < 0:
            raise DataError(f"{where}: negative label {int(vals.min())}; labels must be class indexes >= 0")
        top = int(vals.max())
        if class_names is not None:
            if top >= len(class_names):
                raise DataError(f"{where}: label {top} but only {len(class_names)} class names")
            return labels_array(vals), class_names
        return labels_array(vals), tuple(str(i) for i in range(top + 1))
    raise DataError(f"{where}: labels must be all integers or all strings, got {label_type or 'a mix'}")
