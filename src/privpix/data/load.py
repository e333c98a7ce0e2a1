"""``load_dataset``: images (or records) by dataset name, or by path, the one entry point a user calls; and the
inputs the commands read (a dataset or a folder, a seeded subset, resized), with the same checks for every caller."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from privpix.data.folders import INPUT_FOLDER
from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.loaders import DATASETS, Pick, load_named, picked
from privpix.data.memory import check_resize_fits
from privpix.errors import DataError, ParameterError, arg


def load_dataset(
    spec: str | os.PathLike, data_dir: str | os.PathLike | None = None, pick: Pick | None = None, **options
) -> ImageSet | RecordSet:
    """Load a dataset by name, ``name[:split]`` (:mod:`privpix.data.loaders` lists the names and their splits;
    ``data_dir`` is where the staged ones are, default ``PRIVPIX_DATA``), or your own images by path.

    A path is a folder of images (flat, or one sub-folder per class, whose names become the class names), or
    Parquet or WebDataset shards, read as ``privpix release --input`` reads them
    (:func:`privpix.data.formats.open_source`; ``options``: ``size=(height, width)``, ``max_pixels``). A string is
    a path when it holds a ``/``, or names an existing file or folder and no dataset (write ``./orl`` for a folder
    named like a dataset). The path and the file names are not kept in the set's ``source`` ("the input folder";
    under the command line "the --input folder"): paths and face file names can name people. A resize that cannot
    fit in memory is refused before any image is decoded.

    ``options`` of a named set go to its loader (e.g. ``size=(64, 64)`` for CelebA / LFW). ``pick(n)``, given the
    number ``n`` of items, returns the sorted positions to keep (or None for all): the result equals
    ``load_dataset(spec).subset(pick(n))``, but the face sets decode only the picked images."""
    if not _is_path(spec):
        return load_named(str(spec), data_dir, pick, **options)
    path = Path(spec).expanduser()
    if not path.exists():
        raise DataError(f"dataset: {spec} is neither a dataset name nor an existing file or folder")
    from privpix.data.formats import open_source  # Parquet and WebDataset readers load only for a path

    source = open_source(path, **options)
    check_resize_fits(len(source), options.get("size"), source.shape[2])  # refused before any image is decoded
    # Its source is named, never its path (paths can name people): as the command line's --input, or in words.
    named = replace(source.read(0, len(source)), source=arg(INPUT_FOLDER, "the input folder"))
    return picked(named, pick)


def _is_path(spec: str | os.PathLike) -> bool:
    if not isinstance(spec, str):
        return isinstance(spec, os.PathLike)
    if "/" in spec or os.sep in spec:
        return True
    return spec.partition(":")[0].strip().lower() not in DATASETS and Path(spec).expanduser().exists()


def seeded_pick(limit: int | None, seed: int | None) -> Pick | None:
    """A seeded subset of ``limit`` items as a loader's ``pick`` (:func:`load_dataset`): ``limit`` of the ``n``
    positions, sorted, drawn with ``seed`` (``None``: OS entropy), or all when ``limit`` is ``None`` or not below
    ``n``."""
    if limit is None:
        return None

    def pick(n: int) -> np.ndarray | None:
        if limit >= n:
            return None
        return np.sort(np.random.default_rng(seed).choice(n, limit, replace=False))

    return pick


def load_input(
    dataset: str | None,
    path: str | os.PathLike | None,
    data_dir: str | os.PathLike | None = None,
    size: tuple[int, int] | None = None,
    pick: Pick | None = None,
) -> ImageSet | RecordSet:
    """The images (or records) a model is fitted on: the named ``dataset``, or the images at ``path`` (a folder,
    flat or one sub-folder per class, whose names are its class names, or Parquet or WebDataset shards), resized to
    ``size`` when given; only the items ``pick`` keeps (a named face set decodes only those). A folder's path is not
    kept in the set's ``source`` (paths can name people)."""
    if path is not None:
        return load_dataset(Path(path), size=size, pick=pick)
    assert dataset is not None, "load_input: give a dataset or a path"
    data = load_dataset(dataset, data_dir, pick=pick)
    if size is not None:
        if not isinstance(data, ImageSet):
            raise ParameterError(f"{arg('--size', 'size')}: {arg('--dataset', 'dataset')} {dataset} holds records, "
                                 "not images")  # fmt: skip
        check_resize_fits(len(data), size, data.shape[2])
        data = data.resized(*size)
    return data


def load_images(
    dataset: str | None,
    folder: str | os.PathLike | None,
    data_dir: str | os.PathLike | None = None,
    *,
    size: tuple[int, int] | None = None,
    limit: int | None = None,
    seed: int | None = 0,
    what: str = "images",
    record_source: bool = False,
) -> tuple[ImageSet, str]:
    """The images of the named ``dataset`` or of an image ``folder`` (exactly one), a seeded subset of ``limit`` of
    them (:func:`seeded_pick`), resized to ``size``; and their description: the dataset, or the folder (its path only
    with ``record_source``: paths can name people), with "(seeded subset of N)" when a subset was taken. ``what``
    names the images in the refusal of neither or both."""
    from privpix.data.folders import load_folder

    if (dataset is None) == (folder is None):
        raise ParameterError(
            f"give exactly one of {arg('--dataset NAME[:SPLIT] or --input DIR', 'dataset or folder')} for the {what}"
        )
    if folder is not None:
        data: ImageSet | RecordSet = load_folder(folder)
        source = str(folder) if record_source else arg(INPUT_FOLDER, "the input folder")
    else:
        assert dataset is not None  # exactly one was given
        data, source = load_dataset(dataset, data_dir), dataset
        if not isinstance(data, ImageSet):
            raise ParameterError(f"{arg('--dataset', 'dataset')} {dataset}: holds records, not images")
    if limit is not None:
        if limit < 1:
            raise ParameterError(f"{arg('--limit', 'limit')} must be >= 1, got {limit}")
        if len(data) > limit:
            data, source = picked(data, seeded_pick(limit, seed)), f"{source} (seeded subset of {limit})"
    assert isinstance(data, ImageSet)
    if size is not None:
        check_resize_fits(len(data), size, data.shape[2])
        data = data.resized(*size)
    return data, source
