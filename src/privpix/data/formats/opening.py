"""Opening a source of images by path (a folder, Parquet, tars, a privpix release) or by registered dataset
name: :func:`open_source` and :func:`dataset_source`."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.files import (
    DEFAULT_MAX_PIXELS,
    IMAGE_EXTENSIONS,
    check_max_pixels,
)
from privpix.data.folders import walk_files
from privpix.data.formats.base import ImageSource, labels_array
from privpix.data.formats.imagefolder import FileSource, folder_source
from privpix.data.formats.parquet import parquet_source
from privpix.data.formats.webdataset import tar_source
from privpix.data.imageset import ImageSet
from privpix.data.loaders import DATASETS, celeba_index, lfw_rows, load_named, parse_dataset_spec, resolve_data_dir
from privpix.errors import DataError, ParameterError

# ------------------------------------------------------------------------------------------------ opening


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
      :func:`~privpix.data.folders.list_image_files` (hidden files, links, duplicates, ``max_pixels``; what is
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
            return parquet_source([p], p, size, max_pixels)
        if suffix == ".tar":
            return tar_source([p], p, size, max_pixels)
        raise DataError(
            f"{p}: not a supported input; expected a folder of images, a .parquet file, a .tar (WebDataset) "
            "shard, or a folder of those"
        )
    if not p.is_dir():
        raise DataError(f"{p}: input does not exist")
    files, _ = walk_files(p)
    real = p.resolve()
    # Links out of the folder are not followed for data files either (see scan_folder).
    inside = [f for f in files if f.resolve().is_relative_to(real)]
    images = any(f.suffix.lower() in IMAGE_EXTENSIONS for f in inside)
    # Hugging Face ImageFolder may keep its index as metadata.parquet next to the images.
    parquet = [f for f in inside if f.suffix.lower() == ".parquet" and not (images and f.name == "metadata.parquet")]
    tars = [f for f in inside if f.suffix.lower() == ".tar"]
    kinds = [k for k, v in (("image files", images), ("Parquet files", parquet), (".tar files", tars)) if v]
    if len(kinds) > 1:
        raise DataError(f"{p}: holds {' and '.join(kinds)}; point the input at one kind (a sub-folder or a file)")
    if parquet:
        return parquet_source(parquet, p, size, max_pixels)
    if tars:
        return tar_source(tars, p, size, max_pixels)
    return folder_source(p, size, max_pixels)


# ----------------------------------------------------------------------------------------- named datasets


@lru_cache(maxsize=2)
def _loaded(spec: str, data_dir: str | None) -> ImageSet:
    """A small dataset loaded whole, once per process (the source pickles its name, never its pixels)."""
    data = load_named(spec, data_dir)
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
            self._labels = labels_array(labels)
            self.class_names = data.class_names or tuple(str(i) for i in range(int(labels.max()) + 1))
        self._source = data.source
        self._first = str(_names(data)[0]) if self._n else ""
        self.description = f"dataset {spec} ({self._n:,} images)"

    def _fill(self, out: np.ndarray, start: int, stop: int) -> list[str]:
        data = _loaded(self._spec, self._data_dir)
        names = _names(data)
        for i in range(start, stop):
            self._put(out, i - start, data.images[i], str(names[i]))
        return [str(s) for s in names[start:stop]]

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
    return FileSource(
        base / "img_align_celeba",
        [files[i] for i in keep],
        mode="RGB",
        size=size,
        max_pixels=DEFAULT_MAX_PIXELS,
        labels=labels_array(kept[:, male]),
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
    return FileSource(
        base,
        [r["path"] for r in rows],
        mode="RGB",
        size=size,
        max_pixels=DEFAULT_MAX_PIXELS,
        labels=labels_array(gender),
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
    :func:`~privpix.data.load_named`, ``size`` resizing the same way. The other datasets are small (IDX MNIST,
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


def _names(data: ImageSet) -> np.ndarray:
    """The names of a loaded set (ImageSet.__post_init__ fills them for every set; the field's type allows None)."""
    if data.names is None:  # pragma: no cover - see above
        raise AssertionError("an ImageSet without names")
    return data.names
