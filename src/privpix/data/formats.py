"""Dataset formats in and out: ImageFolder PNGs, Parquet (Hugging Face ``Image`` struct), WebDataset tar shards.

Writing (one release, cut into shards that worker processes write independently into a staging folder)::

    written = write_shard("parquet", stage, shard, n_shards, items)   # per shard, any order, any process
    index_files = finish("parquet", stage, all_rows_in_release_order) # once, after every shard

Reading (random access by index range, in worker processes: a source holds paths and small indexes, never
pixels)::

    source = open_source("photos/")          # a folder of images, *.parquet, *.tar, or a privpix release
    batch = source.read(0, 256)              # ImageSet: uint8 (n, h, w, c), labels, names
    source = dataset_source("celeba:test")   # a registered dataset, read lazily from its files when possible

docs/formats.md has the layouts and how to load each with ``datasets``, torch and ``webdataset``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from PIL import Image

from privpix.data.files import (
    _DECODE_ERRORS,
    DEFAULT_MAX_PIXELS,
    IMAGE_EXTENSIONS,
    _is_grey,
    _one_line,
    _pillow_limit,
    check_max_pixels,
    checked_size,
    decode_opened,
    read_image,
    sha256_file,
)
from privpix.data.imageset import ImageSet
from privpix.data.loaders import (
    DATASETS,
    _resize,
    _scan_folder,
    _walk,
    celeba_index,
    lfw_rows,
    load_dataset,
    parse_dataset_spec,
    resize_whole,
    resolve_data_dir,
)
from privpix.errors import DataError, ParameterError

FORMATS = ("imagefolder", "parquet", "webdataset")

METADATA = "metadata.jsonl"
"""The ImageFolder index (Hugging Face's name): one JSON object per image, in release order."""

# Rows per Parquet row group: Hugging Face's own choice for image datasets. A read of an index range decodes only
# the row groups it overlaps, so this is also the granularity of random access.
PARQUET_ROW_GROUP = 100
# Hugging Face's sharded file pattern allows five digits for the shard number and the count.
_MAX_PARQUET_SHARDS = 100_000

_KEY = re.compile(r"[0-9a-f]{1,64}")
# Hugging Face's data-file resolution takes a folder named like this for a split (datasets.data_files
# SPLIT_KEYWORDS with NON_WORDS_CHARS around them; case-sensitive): `load_dataset("imagefolder", data_dir=...)`
# would then load only that folder's images, silently.
_HF_SPLIT_NAME = re.compile(
    r"(?:.*[-._ 0-9])?(?:train|training|validation|valid|dev|val|test|testing|eval|evaluation)(?:[-._ 0-9].*)?",
    re.DOTALL,
)
# webdataset's grouping rule (tariterators.base_plus_ext): the key is everything before the first dot of the
# file name, the extension everything after it.
_WDS_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_IMAGE_EXTS = {e.lstrip(".") for e in IMAGE_EXTENSIONS}


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


def _check_level(compress_level: int) -> int:
    if isinstance(compress_level, bool) or not isinstance(compress_level, int | np.integer):
        raise ParameterError(f"compress_level must be an integer 0..9, got {compress_level!r}")
    if not 0 <= compress_level <= 9:
        raise ParameterError(f"compress_level must be in 0..9, got {compress_level}")
    return int(compress_level)


def _check_items(fmt: str, items: Sequence[Item], class_names: tuple[str, ...] | None) -> bool:
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


def _png(image: np.ndarray, compress_level: int) -> bytes:
    # The release folder's own encoder: a Pillow image made from the pixels alone, so no source metadata (EXIF,
    # ICC, text) exists to be written, and Pillow writes no time chunk: same pixels, same bytes. Imported here,
    # not at the top, because the release machinery imports this module.
    from privpix.release_folder import png_bytes

    return png_bytes(image, compress_level)


def _check_rel(name: str) -> str:
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts or "\\" in name:
        raise ParameterError(f"file name {name!r} must be a relative path inside the release folder")
    return name


def shard_file(fmt: str, shard: int, n_shards: int) -> str | None:
    """The file one shard writes for ``parquet`` (``data/train-00003-of-00012.parquet``, Hugging Face's own
    pattern) and ``webdataset`` (``shards/shard-000003.tar``); ``None`` for ``imagefolder`` (a PNG per image)."""
    check_format(fmt)
    for name, v in (("shard", shard), ("n_shards", n_shards)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ParameterError(f"{name} must be an integer, got {v!r}")
    if n_shards < 1 or not 0 <= shard < n_shards:
        raise ParameterError(f"shard must be in 0..n_shards-1 with n_shards >= 1, got shard {shard} of {n_shards}")
    if fmt == "parquet":
        if n_shards > _MAX_PARQUET_SHARDS - 1:
            raise ParameterError(f"parquet: at most {_MAX_PARQUET_SHARDS - 1} shards, got {n_shards}")
        return f"data/train-{shard:05d}-of-{n_shards:05d}.parquet"
    if fmt == "webdataset":
        return f"shards/shard-{shard:06d}.tar"
    return None


def write_shard(
    fmt: str,
    folder: Path,
    shard: int,
    n_shards: int,
    items: Sequence[Item],
    *,
    compress_level: int = 1,
    class_names: Sequence[str] | None = None,
) -> Written:
    """Write one shard of a release into ``folder`` (a staging folder) in format ``fmt``.

    Shards may be written in any order, concurrently from different processes, and again after a crash (the
    shard's files are overwritten). Items are written sorted by key, whatever their order in ``items``, so the
    order in a file does not follow the sources' order; ``files`` and ``rows`` come in that order too. The same
    items give the same bytes (no time stamps, no owners in tar headers, JSON with sorted keys). Every file is
    complete and closed on return.

    * ``imagefolder``: ``label/key.png`` (``key.png`` unlabelled); rows ``{"file_name", "label"}``.
    * ``parquet``: ``data/train-SSSSS-of-NNNNN.parquet``, columns ``image`` (Hugging Face ``Image``:
      ``{bytes: PNG, path: "key.png"}``), ``label``, ``key``; row groups of 100 images.
    * ``webdataset``: ``shards/shard-SSSSSS.tar`` with ``key.png``, and when labelled ``key.json``
      (``{"label": name}``) and, with ``class_names``, ``key.cls`` (the class index).

    ``compress_level`` (0–9) is zlib's level for the PNGs. 1 (the default) encodes a 178×218 RGB photo about 3x
    faster than 6 for about 6 % more bytes; on noisy (privatized) pixels the levels differ little in either.
    ``class_names``: every class of the release, in label order. Given, parquet stores labels as integers with
    the names in the schema (``datasets`` reads them as ``ClassLabel``; every shard has the same schema even
    when it holds no image of some class, or none at all) and webdataset adds ``key.cls``; not given, labels
    are stored as strings. Raises :class:`ParameterError` for a bad item (see :func:`check_class_names` for
    the labels ``imagefolder`` refuses).
    """
    check_format(fmt)
    target = shard_file(fmt, shard, n_shards)
    level = _check_level(compress_level)
    names = check_class_names(fmt, class_names)
    labelled = _check_items(fmt, items, names)
    # Written in key order, not in the order given (the sources' order): keys are keyed hashes of positions, so
    # the order inside a Parquet file or a tar reveals nothing about which source image is which.
    items = sorted(items, key=lambda it: it.key)
    folder = Path(folder)
    if fmt == "imagefolder":
        return _write_imagefolder(folder, items, level)
    assert target is not None
    if fmt == "parquet":
        return _write_parquet(folder, target, items, level, names, labelled)
    return _write_tar(folder, target, items, level, names)


def _write_imagefolder(folder: Path, items: Sequence[Item], level: int) -> Written:
    files, rows = [], []
    for it in items:
        rel = f"{it.label}/{it.key}.png" if it.label is not None else f"{it.key}.png"
        data = _png(it.image, level)
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:  # truncates a file left by a crashed run of this shard
            fh.write(data)
        files.append((rel, hashlib.sha256(data).hexdigest()))
        rows.append({"file_name": rel, "label": it.label} if it.label is not None else {"file_name": rel})
    return Written(files, rows)


def _hf_features(labelled: bool, names: tuple[str, ...] | None) -> dict[str, Any]:
    features: dict[str, Any] = {"image": {"_type": "Image"}}
    if labelled:
        if names is not None:
            features["label"] = {"names": list(names), "_type": "ClassLabel"}
        else:
            features["label"] = {"dtype": "string", "_type": "Value"}
    features["key"] = {"dtype": "string", "_type": "Value"}
    return features


def _write_parquet(
    folder: Path, rel: str, items: Sequence[Item], level: int, names: tuple[str, ...] | None, labelled: bool
) -> Written:
    import pyarrow as pa
    import pyarrow.parquet as pq

    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    fields = [pa.field("image", image_type)]
    if labelled:
        fields.append(pa.field("label", pa.int64() if names is not None else pa.string()))
    fields.append(pa.field("key", pa.string()))
    # `datasets` builds its features from this key of the schema metadata (Features.from_arrow_schema): the
    # image column decodes as Image and integer labels as ClassLabel with their names.
    hf = json.dumps({"info": {"features": _hf_features(labelled, names)}}, sort_keys=True)
    schema = pa.schema(fields, metadata={"huggingface": hf})
    index = {n: i for i, n in enumerate(names)} if names is not None else None
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    # Statistics and dictionaries only on the small columns: min/max of PNG bytes would bloat the footer.
    small = ["key", "label"] if labelled else ["key"]
    with pq.ParquetWriter(path, schema, compression="snappy", write_statistics=small, use_dictionary=small) as w:
        for a in range(0, len(items), PARQUET_ROW_GROUP):
            chunk = items[a : a + PARQUET_ROW_GROUP]
            cols: dict[str, Any] = {
                "image": pa.array(
                    [{"bytes": _png(it.image, level), "path": f"{it.key}.png"} for it in chunk], type=image_type
                )
            }
            if labelled:
                labels = [index[it.label] for it in chunk] if index is not None else [it.label for it in chunk]
                cols["label"] = pa.array(labels, type=schema.field("label").type)
            cols["key"] = pa.array([it.key for it in chunk], type=pa.string())
            w.write_table(pa.table(cols, schema=schema), row_group_size=PARQUET_ROW_GROUP)
            for it in chunk:
                row = {"file_name": rel, "key": it.key}
                if it.label is not None:
                    row["label"] = it.label
                rows.append(row)
    return Written([(rel, sha256_file(path))], rows)


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    # Fixed header fields: the same items give the same tar bytes on any machine, at any time, for any user.
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    tar.addfile(info, io.BytesIO(data))


def _write_tar(folder: Path, rel: str, items: Sequence[Item], level: int, names: tuple[str, ...] | None) -> Written:
    index = {n: i for i, n in enumerate(names)} if names is not None else None
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(path, "wb") as fh, tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for it in items:
            _tar_member(tar, f"{it.key}.png", _png(it.image, level))
            row = {"file_name": rel, "key": it.key}
            if it.label is not None:
                if index is not None:
                    _tar_member(tar, f"{it.key}.cls", str(index[it.label]).encode())
                _tar_member(tar, f"{it.key}.json", json.dumps({"label": it.label}, sort_keys=True).encode())
                row["label"] = it.label
            rows.append(row)
    return Written([(rel, sha256_file(path))], rows)


def finish(fmt: str, folder: Path, rows: list[dict]) -> list[tuple[str, str]]:
    """Write the format's index files into ``folder`` from every shard's rows (in any order); returns their
    ``(relative path, sha256)``.

    * ``imagefolder``: ``metadata.jsonl``, one ``{"file_name", "label"}`` object per image, sorted by file name
      (like the manifest: an order that says nothing about the sources), which ``datasets.load_dataset(
      "imagefolder", data_dir=folder)`` uses for the order and the labels (it ignores ``manifest.json`` and
      hidden files).
    * ``parquet``, ``webdataset``: nothing; returns ``[]``. The Parquet files carry their schema and class names,
      and the tars their ``.json`` / ``.cls`` members. (A ``.json`` shard index would also tip Hugging Face's
      format guess for ``load_dataset(folder)`` towards its JSON loader, as ``manifest.json`` already does for a
      one-shard WebDataset release.)
    """
    check_format(fmt)
    folder = Path(folder)
    if fmt != "imagefolder":
        return []
    lines = []
    for row in sorted(rows, key=lambda r: str(r["file_name"])):
        name = _check_rel(str(row["file_name"]))
        entry = {"file_name": name}
        if row.get("label") is not None:
            entry["label"] = row["label"]
        lines.append(json.dumps(entry, sort_keys=True) + "\n")
    data = "".join(lines).encode("utf-8")
    (folder / METADATA).write_bytes(data)
    return [(METADATA, hashlib.sha256(data).hexdigest())]


# ================================================================================================== reading


@contextmanager
def _open_bytes(data: bytes, name: str, max_pixels: int | None) -> Iterator[Image.Image]:
    """:func:`privpix.data.files.open_image` for an image held in memory (a Parquet cell, a tar member): the same
    header check against ``max_pixels`` before decoding, the same one-line errors, naming ``name``."""
    with _pillow_limit(None):
        try:
            im = Image.open(io.BytesIO(data))
        except _DECODE_ERRORS as exc:
            raise DataError(f"{name}: not a readable image ({_one_line(exc)})") from None
    with checked_size(im, name, max_pixels) as im:
        yield im


def _probe_bytes(data: bytes, name: str, max_pixels: int | None) -> tuple[int, int, bool]:
    """(width, height, grey by header) of an in-memory image, nothing decoded."""
    with _open_bytes(data, name, max_pixels) as im:
        try:
            return im.size[0], im.size[1], _is_grey(im)
        except _DECODE_ERRORS as exc:
            raise DataError(f"{name}: not a readable image ({_one_line(exc)})") from None


def _decode_bytes(data: bytes, name: str, mode: str, max_pixels: int | None) -> np.ndarray:
    """An in-memory image as uint8 ``(h, w, c)`` in ``mode``, decoded exactly as
    :func:`privpix.data.files.read_image` decodes a file (docs/decoding.md)."""
    with _open_bytes(data, name, max_pixels) as im:
        return decode_opened(im, mode, name)


def _check_size(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    try:
        h, w = size
    except (TypeError, ValueError):
        raise ParameterError(f"size must be (height, width), got {size!r}") from None
    for v in (h, w):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ParameterError(f"size must be two positive integers (height, width), got {size!r}")
    return int(h), int(w)


def _mismatch(name: str, shape: tuple[int, ...], first: str, expected: tuple[int, ...]) -> DataError:
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
        stop = self._n if stop is None else stop
        h = hashlib.sha256(f"{self.description}|{self.class_names}|{self.shape}|{start}:{stop}".encode())
        for path in self._paths(start, stop):
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

    def _put(self, out: np.ndarray, i: int, img: np.ndarray, name: str, resize=_resize) -> None:
        """Resize (when asked) and store one decoded image, refusing one whose shape differs."""
        if self._size is not None:
            img = resize(img, self._size)
        if img.shape != out.shape[1:]:
            raise _mismatch(name, img.shape, self._first, self.shape)
        out[i] = img


class _Headers:
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
            raise _mismatch(name, (h, w), self.first[0], (self.first[3], self.first[2]))

    def mode_and_shape(self) -> tuple[str, tuple[int, int, int]]:
        assert self.first is not None
        mode = "L" if self.grey else "RGB"
        if self.size is not None:
            return mode, (*self.size, 1 if mode == "L" else 3)
        # Decoded, not from the header: an EXIF orientation swaps width and height.
        img = _decode_bytes(self.first[1], self.first[0], mode, self.max_pixels)
        return mode, img.shape  # type: ignore[return-value]


def _pack_names(names: Sequence[str]) -> bytes:
    """Names as one compressed blob: a source is pickled to every task, and a folder's paths share long
    prefixes. NUL cannot occur in a file name or a tar member name."""
    return zlib.compress("\0".join(names).encode("utf-8", "surrogateescape"), 1)


def _unpack_names(blob: bytes, n: int) -> list[str]:
    if n == 0:
        return []
    return zlib.decompress(blob).decode("utf-8", "surrogateescape").split("\0")


def _labels_array(values: Sequence[int]) -> np.ndarray:
    # The smallest integer type: a source (with its labels) is pickled to every worker.
    arr = np.asarray(values, dtype=np.int64)
    if arr.size == 0:
        return arr.astype(np.int32)
    return arr.astype(np.min_scalar_type(-max(1, int(arr.max()) + 1)))


# ------------------------------------------------------------------------------------------ folders of files


class _FileSource(ImageSource):
    """Image files under a root: a folder (the folder rules of list_image_files) or a dataset's files."""

    def __init__(
        self,
        root: Path,
        rel: Sequence[str],
        *,
        mode: str,
        size: tuple[int, int] | None,
        max_pixels: int | None,
        labels: np.ndarray | None,
        class_names: tuple[str, ...] | None,
        source: str,
        description: str,
        loader_resize: bool = False,
        subjects: np.ndarray | None = None,
        attributes: tuple[tuple[str, ...], np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        self._root = Path(root)
        self._rel = list(rel)
        self._mode = mode
        self._size = size
        self._max_pixels = max_pixels
        self._labels = labels
        self.class_names = class_names
        self._source = source
        self.description = description
        self._loader_resize = loader_resize
        self._subjects = subjects
        self._attributes = attributes
        self._n = len(self._rel)
        self._first = str(self._root / self._rel[0]) if self._n else ""
        if self._n:
            # The exact shape of the first image (decoded: an EXIF rotation swaps width and height).
            img = read_image(self._root / self._rel[0], mode, max_pixels=max_pixels)
            if size is not None:
                img = self._resize_fn()(img, size)
            self.shape = img.shape  # type: ignore[assignment]
        else:
            self.shape = (*(size or (0, 0)), 1 if mode == "L" else 3)  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_rel"] = _pack_names(self._rel)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_rel"] = _unpack_names(state["_rel"], state["_n"])
        self.__dict__.update(state)

    def _resize_fn(self):
        return resize_whole if self._loader_resize else _resize

    def _paths(self, start: int, stop: int) -> list[str]:
        root = self._root.resolve()
        return [str(root / r) for r in self._rel[start:stop]]

    def _fill(self, out: np.ndarray, start: int, stop: int) -> list[str]:
        names = []
        resize = self._resize_fn()
        for i in range(start, stop):
            rel = str(self._rel[i])
            path = self._root / rel
            img = read_image(path, self._mode, max_pixels=self._max_pixels)
            self._put(out, i - start, img, str(path), resize)
            names.append(rel)
        return names

    def _extras(self, start: int, stop: int) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self._subjects is not None:
            extra["subjects"] = self._subjects[start:stop]
        if self._attributes is not None:
            attr_names, values = self._attributes
            extra["attributes"] = {n: values[start:stop, j].astype(np.int64) for j, n in enumerate(attr_names)}
        return extra


def _privpix_release(root: Path) -> bool:
    """Whether ``root`` holds a privpix manifest (another program's ``manifest.json`` is just a file)."""
    from privpix.release_folder import read_manifest

    try:
        return read_manifest(root) is not None
    except DataError:
        return False


def _metadata_order(root: Path, rels: list[str]) -> list[str] | None:
    """The image order of a top-level ``metadata.jsonl`` (Hugging Face ImageFolder, a privpix release) when it
    lists exactly the images found, each once; else ``None``."""
    path = root / METADATA
    if not path.is_file():
        return None
    order: list[str] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    entry = json.loads(line)
                    order.append(str(entry["file_name"]) if isinstance(entry, dict) else "")
    except (OSError, UnicodeDecodeError, ValueError, KeyError):
        return None
    if len(order) != len(rels) or set(order) != set(rels):
        return None
    return order


def _drop_own_files(root: Path, skipped: list[tuple[Path, str]], *, used_metadata: bool) -> list[tuple[Path, str]]:
    """``skipped`` without the index files read here and a privpix release's own files (manifest, lock, commit
    journal, leftover staging): they are not images the user would miss."""
    from privpix.release_folder import JOURNAL, LOCK, MANIFEST, STAGING_PREFIX

    release = _privpix_release(root)
    out = []
    for p, why in skipped:
        parts = p.relative_to(root).parts if p.is_relative_to(root) else ()
        top = parts[0] if parts else ""
        if len(parts) == 1 and top == METADATA:
            if used_metadata:
                continue
            why = "metadata.jsonl does not list exactly the images found, so images are read in path order"
        elif release and ((len(parts) == 1 and top in (MANIFEST, LOCK, JOURNAL)) or (top.startswith(STAGING_PREFIX))):
            continue
        out.append((p, why))
    return out


def _folder_source(root: Path, size: tuple[int, int] | None, max_pixels: int | None) -> ImageSource:
    root, entries, skipped = _scan_folder(root, max_pixels)
    mode = "L" if all(e.header.grey for e in entries) else "RGB"
    classes = sorted({e.cls for e in entries if e.cls is not None})
    by_rel = {e.path.relative_to(root).as_posix(): e for e in entries}
    rels = list(by_rel)
    order = _metadata_order(root, rels)
    if order is not None:
        rels = order
    skipped = _drop_own_files(root, skipped, used_metadata=order is not None)
    index = {c: i for i, c in enumerate(classes)}
    labels = _labels_array([index[by_rel[r].cls] for r in rels]) if classes else None  # type: ignore[index]
    if size is None:
        first = by_rel[rels[0]].header
        for r in rels:
            h = by_rel[r].header
            if (h.width, h.height) != (first.width, first.height):
                raise _mismatch(str(h.path), (h.height, h.width), str(first.path), (first.height, first.width))
    n = len(rels)
    what = f"{n:,} image{'s' if n != 1 else ''}" + (f", {len(classes)} classes" if classes else "")
    src = _FileSource(
        root,
        rels,
        mode=mode,
        size=size,
        max_pixels=max_pixels,
        labels=labels,
        class_names=tuple(classes) or None,
        source=str(root),
        description=f"folder {root} ({what})",
    )
    src.skipped = [(str(p), why) for p, why in skipped]
    return src


# ----------------------------------------------------------------------------------------------- parquet


def _hf_meta(schema: Any) -> dict[str, Any]:
    """The ``datasets`` features stored in a Parquet schema's ``huggingface`` metadata ({} when none)."""
    meta = schema.metadata or {}
    raw = meta.get(b"huggingface")
    if raw is None:
        return {}
    try:
        features = json.loads(raw.decode("utf-8")).get("info", {}).get("features") or {}
    except (UnicodeDecodeError, ValueError, AttributeError):
        return {}
    return features if isinstance(features, dict) else {}


def _is_image_type(t: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return True
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        if "bytes" in names:
            b = t.field("bytes").type
            return pa.types.is_binary(b) or pa.types.is_large_binary(b)
    return False


def _parquet_columns(path: Path, schema: Any) -> tuple[str, str | None, tuple[str, ...] | None]:
    """(image column, label column or None, ClassLabel names or None) of one file."""
    features = _hf_meta(schema)
    names = list(schema.names)
    if "image" in names:
        image = "image"
    else:
        tagged = [n for n in names if isinstance(features.get(n), dict) and features[n].get("_type") == "Image"]
        if len(tagged) != 1:
            raise DataError(
                f"{path}: no image column (expected 'image' holding the Hugging Face Image struct {{bytes, path}}"
                f" or PNG/JPEG bytes); columns: {', '.join(names)}"
            )
        image = tagged[0]
    if not _is_image_type(schema.field(image).type):
        raise DataError(
            f"{path}: column {image!r} is {schema.field(image).type}, expected the Hugging Face Image struct "
            "{bytes: binary, path: string} or binary"
        )
    if "label" in names:
        label: str | None = "label"
    else:
        tagged = [n for n in names if isinstance(features.get(n), dict) and features[n].get("_type") == "ClassLabel"]
        label = tagged[0] if len(tagged) == 1 else None
    class_names = None
    if label is not None:
        f = features.get(label)
        if isinstance(f, dict) and f.get("_type") == "ClassLabel" and isinstance(f.get("names"), list):
            class_names = tuple(str(x) for x in f["names"])
    return image, label, class_names


def _cell_bytes(column: Any) -> list[bytes | None]:
    """The image bytes of a Parquet image column (struct or binary), one per row."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_struct(arr.type):
        # flatten(), not field(): a null struct must give a null, not whatever its child slot holds.
        arr = arr.flatten()[arr.type.get_field_index("bytes")]
    return arr.to_pylist()


class _ContainerSource(ImageSource):
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


class _ParquetSource(_ContainerSource):
    """Rows of Parquet files, read row group by row group."""

    def __init__(self, files: list[tuple[str, str]], groups: np.ndarray, image: str, **settings: Any) -> None:
        super().__init__(files, **settings)
        # One row per row group: file index, row group index in the file, first row (of the source), row count,
        # first row within its file.
        self._groups = groups
        self._image = image
        self._n = int(groups[:, 2][-1] + groups[:, 3][-1]) if len(groups) else 0

    def _fill(self, out: np.ndarray, start: int, stop: int) -> list[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        names: list[str] = []
        opened: dict[int, Any] = {}
        # The row groups that overlap [start, stop), and nothing else.
        g = int(np.searchsorted(self._groups[:, 2], start, side="right")) - 1
        try:
            while start < stop and g < len(self._groups) and self._groups[g, 2] < stop:
                fi, rg, first, count, file_first = (int(v) for v in self._groups[g])
                g += 1
                if not count:
                    continue
                path, rel = self._files[fi]
                try:
                    if fi not in opened:
                        opened[fi] = pq.ParquetFile(path)
                    cells = _cell_bytes(opened[fi].read_row_group(rg, columns=[self._image]).column(0))
                except (OSError, pa.ArrowException) as exc:
                    raise DataError(f"{path}: row group {rg} cannot be read ({_one_line(exc)})") from None
                if len(cells) != count:
                    raise DataError(f"{path}: row group {rg} changed since the source was opened")
                for row in range(max(start, first), min(stop, first + count)):
                    local = row - first + file_first
                    data = cells[row - first]
                    if data is None:
                        raise DataError(
                            f"{path}#{local}: the image has no bytes (an image stored by path is not supported)"
                        )
                    img = _decode_bytes(data, f"{path}#{local}", self._mode, self._max_pixels)
                    self._put(out, row - start, img, f"{path}#{local}")
                    names.append(f"{rel}#{local}")
        finally:
            for pf in opened.values():
                pf.close()
        return names


def _parquet_source(paths: list[Path], root: Path, size: tuple[int, int] | None, max_pixels: int | None) -> ImageSource:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files: list[tuple[str, str]] = []
    groups: list[tuple[int, int, int, int, int]] = []
    image = label = None
    class_names: tuple[str, ...] | None = None
    label_type = None
    raw_labels: list[Any] = []
    headers = _Headers(size, max_pixels)
    total = 0
    for fi, path in enumerate(paths):
        rel = path.name if path == root else path.relative_to(root).as_posix()
        try:
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None
        with pf:
            img_col, lab_col, names = _parquet_columns(path, schema)
            if image is None:
                image, label, class_names = img_col, lab_col, names
                label_type = None if lab_col is None else schema.field(lab_col).type
            elif (img_col, lab_col, names) != (image, label, class_names) or (
                lab_col is not None and schema.field(lab_col).type != label_type
            ):
                raise DataError(
                    f"{path}: its image/label columns or class names differ from {paths[0]}'s; read one dataset "
                    "(split) at a time"
                )
            files.append((str(path), rel))
            in_file = 0
            cols = [image] + ([label] if label is not None else [])
            for rg in range(pf.num_row_groups):
                count = 0
                try:
                    # The header pass reads the image bytes once, a few hundred images in memory at a time.
                    for batch in pf.iter_batches(batch_size=256, row_groups=[rg], columns=cols):
                        for k, data in enumerate(_cell_bytes(batch.column(0))):
                            where = f"{path}#{in_file + count + k}"
                            if data is None:
                                raise DataError(
                                    f"{where}: the image has no bytes (an image stored by path is not supported)"
                                )
                            headers.add(data, where)
                        if label is not None:
                            raw_labels.extend(batch.column(1).to_pylist())
                        count += batch.num_rows
                except (OSError, pa.ArrowException) as exc:
                    raise DataError(f"{path}: row group {rg} cannot be read ({_one_line(exc)})") from None
                groups.append((fi, rg, total, count, in_file))
                total += count
                in_file += count
    if total == 0:
        raise DataError(f"{root}: the Parquet file(s) hold no rows")
    labels, class_names = _encode_labels(raw_labels, class_names, label_type, root) if label else (None, None)
    mode, shape = headers.mode_and_shape()
    n_files = len(files)
    return _ParquetSource(
        files,
        np.array(groups, dtype=np.int64),
        image,  # type: ignore[arg-type]
        mode=mode,
        size=size,
        max_pixels=max_pixels,
        labels=labels,
        class_names=class_names,
        shape=shape,
        first=headers.first[0],  # type: ignore[index]
        source=str(root),
        description=f"parquet {root} ({n_files} file{'s' if n_files != 1 else ''}, {total:,} rows)",
    )


def _encode_labels(
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
        return _labels_array([index[v] for v in raw]), names
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in raw):
        vals = np.asarray(raw, dtype=np.int64)
        if vals.min() < 0:
            raise DataError(f"{where}: negative label {int(vals.min())}; labels must be class indexes >= 0")
        top = int(vals.max())
        if class_names is not None:
            if top >= len(class_names):
                raise DataError(f"{where}: label {top} but only {len(class_names)} class names")
            return _labels_array(vals), class_names
        return _labels_array(vals), tuple(str(i) for i in range(top + 1))
    raise DataError(f"{where}: labels must be all integers or all strings, got {label_type or 'a mix'}")


# ------------------------------------------------------------------------------------------------- tars


class _TarSource(_ContainerSource):
    """Samples of WebDataset tar shards, read from the member offsets indexed at open."""

    def __init__(self, tars: list[tuple[str, str]], index: np.ndarray, keys: list[str], **settings: Any) -> None:
        super().__init__(tars, **settings)
        self._index = index  # per sample: tar index, data offset, data size
        self._keys = list(keys)
        self._n = len(keys)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_keys"] = _pack_names(self._keys)
        # Offsets and sizes are mostly zero high bytes: compressed, about 8 bytes a sample instead of 24.
        state["_index"] = zlib.compress(np.ascontiguousarray(self._index, dtype="<i8").tobytes(), 1)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_keys"] = _unpack_names(state["_keys"], state["_n"])
        state["_index"] = np.frombuffer(zlib.decompress(state["_index"]), dtype="<i8").reshape(-1, 3)
        self.__dict__.update(state)

    def _fill(self, out: np.ndarray, start: int, stop: int) -> list[str]:
        names = []
        fds: dict[int, int] = {}
        try:
            for i in range(start, stop):
                ti, offset, size = (int(v) for v in self._index[i])
                if ti not in fds:
                    fds[ti] = os.open(self._files[ti][0], os.O_RDONLY)
                # pread: no shared file position, so threads of one worker may read the same source at once.
                data = os.pread(fds[ti], size, offset)
                full = f"{self._files[ti][0]}#{self._keys[i]}"
                if len(data) != size:
                    raise DataError(f"{full}: the tar file is shorter than its index (changed since it was opened?)")
                self._put(out, i - start, _decode_bytes(data, full, self._mode, self._max_pixels), full)
                names.append(f"{self._files[ti][1]}#{self._keys[i]}")
        except OSError as exc:
            raise DataError(f"{self._files[ti][0]}: cannot be read ({exc.strerror or exc})") from None
        finally:
            for fd in fds.values():
                os.close(fd)
        return names


def _tar_label(ext: str, data: bytes, where: str) -> Any:
    try:
        if ext == "cls":
            return int(data.decode("ascii").strip())
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DataError(f"{where}.{ext}: not a valid {'class number' if ext == 'cls' else 'JSON object'}") from None
    if isinstance(obj, dict) and "label" in obj:
        v = obj["label"]
        if isinstance(v, str | int) and not isinstance(v, bool):
            return v
        raise DataError(f"{where}.json: label must be a string or an integer, got {v!r}")
    return None


def _tar_source(paths: list[Path], root: Path, size: tuple[int, int] | None, max_pixels: int | None) -> ImageSource:
    tars: list[tuple[str, str]] = []
    index: list[tuple[int, int, int]] = []
    keys: list[str] = []
    cls_values: list[int | None] = []
    json_values: list[Any] = []
    skipped: list[tuple[str, str]] = []
    headers = _Headers(size, max_pixels)

    def add(ti: int, rel: str, key: str, members: dict[str, tuple[int, int, bytes | None]]) -> None:
        where = f"{tars[ti][0]}#{key}"
        imgs = sorted(e for e in members if e in _IMAGE_EXTS)
        if not imgs:
            skipped.append((f"{rel}#{key}", "no image member"))
            return
        if len(imgs) > 1:
            raise DataError(f"{where}: holds {len(imgs)} images ({', '.join(imgs)}); expected one per sample")
        offset, nbytes, data = members[imgs[0]]
        headers.add(data, where)  # type: ignore[arg-type]
        index.append((ti, offset, nbytes))
        keys.append(key)
        cls_values.append(_tar_label("cls", members["cls"][2], where) if "cls" in members else None)  # type: ignore[arg-type]
        json_values.append(_tar_label("json", members["json"][2], where) if "json" in members else None)  # type: ignore[arg-type]

    for ti, path in enumerate(paths):
        rel = path.name if path == root else path.relative_to(root).as_posix()
        tars.append((str(path), rel))
        key, members = None, {}
        try:
            # Plain tar only ("r:"): compressed shards have no member offsets to seek to.
            with tarfile.open(path, mode="r:") as tf:
                for m in tf:
                    match = _WDS_NAME.match(m.name) if m.isfile() else None
                    if match is None:
                        continue
                    # webdataset groups consecutive members with the same key into one sample.
                    if match.group(1) != key:
                        if key is not None:
                            add(ti, rel, key, members)
                        key, members = match.group(1), {}
                    ext = match.group(2).lower()
                    if ext in members:
                        raise DataError(f"{path}#{key}: holds two '{ext}' members")
                    # Only the image and the label members are read (one sample's worth at a time).
                    wanted = ext in _IMAGE_EXTS or ext in ("cls", "json")
                    data = tf.extractfile(m).read() if wanted else None  # type: ignore[union-attr]
                    members[ext] = (m.offset_data, m.size, data)
        except tarfile.ReadError as exc:
            raise DataError(
                f"{path}: not a plain (uncompressed) tar file ({_one_line(exc)}); WebDataset shards are read by "
                "member offset, so unpack a compressed shard to .tar first"
            ) from None
        except OSError as exc:
            raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if key is not None:
            add(ti, rel, key, members)
    if not keys:
        raise DataError(f"{root}: no WebDataset samples with an image (png, jpg, jpeg, pgm, webp...) found")
    labels, class_names = _tar_labels(cls_values, json_values, root)
    mode, shape = headers.mode_and_shape()
    n = len(tars)
    src = _TarSource(
        tars,
        np.array(index, dtype=np.int64),
        keys,
        mode=mode,
        size=size,
        max_pixels=max_pixels,
        labels=labels,
        class_names=class_names,
        shape=shape,
        first=headers.first[0],  # type: ignore[index]
        source=str(root),
        description=f"webdataset {root} ({n} shard{'s' if n != 1 else ''}, {len(keys):,} samples)",
    )
    src.skipped = skipped
    return src


def _tar_labels(
    cls_values: list[int | None], json_values: list[Any], where: Path
) -> tuple[np.ndarray | None, tuple[str, ...] | None]:
    """Labels from ``.cls`` (class index) and ``.json`` ``{"label": ...}``: indexes keep their values, with the
    names the ``.json`` members give them (as privpix writes both); names alone are indexed in sorted order."""
    if all(v is None for v in cls_values):
        # From .json alone: integers are class indexes, strings class names.
        return _encode_labels(json_values, None, None, where)
    if any(v is None for v in cls_values):
        i = next(k for k, v in enumerate(cls_values) if v is None)
        raise DataError(f"{where}: sample {i} has no .cls while others have one; label every sample or none")
    vals = np.asarray(cls_values, dtype=np.int64)
    if vals.min() < 0:
        raise DataError(f"{where}: negative class number {int(vals.min())} in a .cls member")
    names: dict[int, str] = {}
    for v, j in zip(vals, json_values, strict=True):
        if isinstance(j, str):
            if names.setdefault(int(v), j) != j:
                raise DataError(f"{where}: class {int(v)} is named both {names[int(v)]!r} and {j!r}")
    top = int(vals.max())
    return _labels_array(vals), tuple(names.get(i, str(i)) for i in range(top + 1))


# ------------------------------------------------------------------------------------------------ opening


def open_source(
    path: str | os.PathLike,
    *,
    size: tuple[int, int] | None = None,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> ImageSource:
    """An :class:`ImageSource` over ``path``, its format detected:

    * a ``.parquet`` file, or a folder holding ``*.parquet`` files (searched recursively, read in path order: a
      Hugging Face snapshot's ``data/train-*.parquet``, a privpix Parquet release): column ``image`` (the Hugging
      Face ``Image`` struct ``{bytes, path}``, or raw bytes; another name is found by its ``Image`` feature) and
      an optional ``label`` (integers with ``ClassLabel`` names from the schema, or strings);
    * a ``.tar`` file, or a folder holding ``*.tar`` files (WebDataset: members grouped by key, the image in a
      png/jpg/jpeg/pgm/webp/... member, the label in ``.cls`` or ``.json`` ``{"label": ...}``);
    * otherwise a folder of image files, flat or one sub-folder per class, by the rules of
      :func:`~privpix.data.loaders.list_image_files` (hidden files, links, duplicates, ``max_pixels``; what is
      passed over is in :attr:`~ImageSource.skipped`). A top-level ``metadata.jsonl`` listing exactly the
      images found (Hugging Face ImageFolder, a privpix release) gives the order; a privpix release's
      ``manifest.json`` and ``metadata.jsonl`` are not reported as skipped.

    Every image header is read once at open (nothing decoded except the first image): the colour mode is 'L'
    only when every image is grey by its header, else 'RGB' (docs/decoding.md), and every image must have the
    same size unless ``size`` (height, width) resizes them. A folder holding two kinds (images and Parquet, or
    Parquet and tar) is refused. Errors are :class:`DataError` naming the file (``file#row``, ``shard#key``).
    """
    size = _check_size(size)
    max_pixels = check_max_pixels(max_pixels)
    p = Path(path).expanduser()
    if p.is_file():
        suffix = p.suffix.lower()
        if suffix == ".parquet":
            return _parquet_source([p], p, size, max_pixels)
        if suffix == ".tar":
            return _tar_source([p], p, size, max_pixels)
        raise DataError(
            f"{p}: not a supported input; expected a folder of images, a .parquet file, a .tar (WebDataset) "
            "shard, or a folder of those"
        )
    if not p.is_dir():
        raise DataError(f"{p}: input does not exist")
    files, _ = _walk(p)
    real = p.resolve()
    # Links out of the folder are not followed for data files either (see _scan_folder).
    inside = [f for f in files if f.resolve().is_relative_to(real)]
    images = any(f.suffix.lower() in IMAGE_EXTENSIONS for f in inside)
    # Hugging Face ImageFolder may keep its index as metadata.parquet next to the images.
    parquet = [f for f in inside if f.suffix.lower() == ".parquet" and not (images and f.name == "metadata.parquet")]
    tars = [f for f in inside if f.suffix.lower() == ".tar"]
    kinds = [k for k, v in (("image files", images), ("Parquet files", parquet), (".tar files", tars)) if v]
    if len(kinds) > 1:
        raise DataError(f"{p}: holds {' and '.join(kinds)}; point the input at one kind (a sub-folder or a file)")
    if parquet:
        return _parquet_source(parquet, p, size, max_pixels)
    if tars:
        return _tar_source(tars, p, size, max_pixels)
    return _folder_source(p, size, max_pixels)


# ----------------------------------------------------------------------------------------- named datasets


@lru_cache(maxsize=2)
def _loaded(spec: str, data_dir: str | None) -> ImageSet:
    """A small dataset loaded whole, once per process (the source pickles its name, never its pixels)."""
    data = load_dataset(spec, data_dir)
    assert isinstance(data, ImageSet)
    return data


class _LoadedSource(ImageSource):
    """A small registered dataset (IDX MNIST, ORL, Yale, built-ins): loaded whole in each process that reads."""

    def __init__(self, spec: str, data_dir: str | None, size: tuple[int, int] | None) -> None:
        super().__init__()
        self._spec = spec
        self._data_dir = data_dir
        self._size = size
        data = _loaded(spec, data_dir)
        self._n = len(data)
        c = data.shape[2]
        self.shape = (*size, c) if size is not None else data.shape  # type: ignore[assignment]
        if data.labels is not None:
            labels = np.asarray(data.labels, dtype=np.int64)
            self._labels = _labels_array(labels)
            self.class_names = data.class_names or tuple(str(i) for i in range(int(labels.max()) + 1))
        self._source = data.source
        self._first = str(data.names[0]) if self._n else ""
        self.description = f"dataset {spec} ({self._n:,} images)"

    def _fill(self, out: np.ndarray, start: int, stop: int) -> list[str]:
        data = _loaded(self._spec, self._data_dir)
        for i in range(start, stop):
            self._put(out, i - start, data.images[i], str(data.names[i]))
        return [str(s) for s in data.names[start:stop]]

    def _extras(self, start: int, stop: int) -> dict[str, Any]:
        data = _loaded(self._spec, self._data_dir)
        extra: dict[str, Any] = {}
        if data.subjects is not None:
            extra["subjects"] = data.subjects[start:stop]
        if data.attributes:
            extra["attributes"] = {k: np.asarray(v)[start:stop] for k, v in data.attributes.items()}
        return extra


def _celeba_source(root: Path, spec: str, split: str | None, size: tuple[int, int] | None) -> ImageSource:
    # The same files, order, split and labels as loaders.load_celeba, without decoding anything up front.
    base = root / "celeba_subset"
    files, attr_names, values, subjects, keep = celeba_index(base, split)
    male = attr_names.index("Male")
    kept = np.asarray(values[keep] == 1, dtype=np.int8)
    return _FileSource(
        base / "img_align_celeba",
        [files[i] for i in keep],
        mode="RGB",
        size=size,
        max_pixels=DEFAULT_MAX_PIXELS,
        labels=_labels_array(kept[:, male]),
        class_names=("female", "male"),
        source="celeba",
        description=f"dataset {spec} ({len(keep):,} images, read lazily from {base / 'img_align_celeba'})",
        loader_resize=True,
        subjects=subjects[keep],
        attributes=(tuple(attr_names), kept),
    )


def _lfw_source(root: Path, spec: str, split: str | None, size: tuple[int, int] | None) -> ImageSource:
    # The same files, order, split and labels as loaders.load_lfw_gender.

    base = root / "lfw_gender_genderrecog"
    rows = lfw_rows(base, split)
    persons = np.array([r["person"] for r in rows])
    _, subj = np.unique(persons, return_inverse=True)
    gender = np.array([r["gender"] == "female" for r in rows], dtype=np.int8)
    return _FileSource(
        base,
        [r["path"] for r in rows],
        mode="RGB",
        size=size,
        max_pixels=DEFAULT_MAX_PIXELS,
        labels=_labels_array(gender),
        class_names=("male", "female"),
        source="lfw-gender",
        description=f"dataset {spec} ({len(rows):,} images, read lazily from {base})",
        loader_resize=True,
        subjects=subj,
        attributes=(("female",), gender[:, None]),
    )


def dataset_source(
    spec: str, data_dir: str | os.PathLike | None = None, size: tuple[int, int] | None = None
) -> ImageSource:
    """An :class:`ImageSource` over a registered dataset ``name[:split]`` (see :data:`~privpix.data.DATASETS`).

    CelebA and LFW-gender are read lazily from their image files, by index, so memory does not grow with the
    dataset; their images, labels (``Male`` / ``female``), subjects and attributes equal those of
    :func:`~privpix.data.load_dataset`, ``size`` resizing the same way. The other datasets are small (IDX MNIST,
    ORL, Yale, the built-ins): each process that reads loads the whole set once (the source pickles its name,
    not its pixels), and ``size`` resizes per image. Records datasets (UCI Adult) raise :class:`ParameterError`.
    """
    size = _check_size(size)
    name, split = parse_dataset_spec(spec)
    info = DATASETS[name]
    if info.kind != "images":
        raise ParameterError(f"dataset: {name!r} holds {info.kind}, not images; it cannot be an image source")
    root = None
    if info.folder is not None:
        root = resolve_data_dir(data_dir)
        if not (root / info.folder).is_dir():
            raise DataError(f"{root / info.folder}: dataset folder for {name!r} is missing")
    label = f"{name}:{split}" if split else name
    if name == "celeba":
        return _celeba_source(root, label, split, size)  # type: ignore[arg-type]
    if name == "lfw-gender":
        return _lfw_source(root, label, split, size)  # type: ignore[arg-type]
    return _LoadedSource(label, None if root is None else str(root), size)
