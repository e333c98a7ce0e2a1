"""``load_dataset``: images (or records) by dataset name, or by path, the one entry point a user calls."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from privpix.data.folders import INPUT_FOLDER
from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.loaders import DATASETS, Pick, load_named, picked
from privpix.data.memory import check_resize_fits
from privpix.errors import DataError, arg


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
