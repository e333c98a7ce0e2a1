"""Writing one release in shards, any worker in any order (:func:`write_shard`), and its index files once at
the end (:func:`finish`), whatever the format."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath

import numpy as np

from privpix.data.formats.base import (
    METADATA,
    Item,
    Written,
    check_class_names,
    check_format,
    check_items,
)
from privpix.data.formats.imagefolder import write_imagefolder
from privpix.data.formats.parquet import write_parquet
from privpix.data.formats.release_layout import SPILL
from privpix.data.formats.webdataset import write_tar
from privpix.errors import ParameterError
from privpix.fileio import write_chunks_atomic
from privpix.spill import SortedSpill

# Hugging Face's sharded file pattern allows five digits for the shard number and the count.
_MAX_PARQUET_SHARDS = 100_000


def _check_level(compress_level: int) -> int:
    if isinstance(compress_level, bool) or not isinstance(compress_level, int | np.integer):
        raise ParameterError(f"compress_level must be an integer 0..9, got {compress_level!r}")
    if not 0 <= compress_level <= 9:
        raise ParameterError(f"compress_level must be in 0..9, got {compress_level}")
    return int(compress_level)


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
    labelled = check_items(fmt, items, names)
    # Written in key order, not in the order given (the sources' order): keys are keyed hashes of positions, so
    # the order inside a Parquet file or a tar reveals nothing about which source image is which.
    items = sorted(items, key=lambda it: it.key)
    folder = Path(folder)
    if fmt == "imagefolder":
        return write_imagefolder(folder, items, level)
    assert target is not None
    if fmt == "parquet":
        return write_parquet(folder, target, items, level, names, labelled)
    return write_tar(folder, target, items, level, names)


def index_rows(folder: Path) -> SortedSpill:
    """A list of index rows too long to hold (a million images): spilled to a hidden folder inside ``folder`` in
    sorted runs; give it to :func:`finish` as it is, which then sorts nothing again."""
    return SortedSpill(Path(folder) / SPILL / "index", key=_row_name)


def _row_name(row: dict) -> str:
    return str(row["file_name"])


def finish(fmt: str, folder: Path, rows: Iterable[dict]) -> list[tuple[str, str]]:
    """Write the format's index files into ``folder`` from every shard's rows (in any order, or an
    :func:`index_rows` list); returns their ``(relative path, sha256)``.

    * ``imagefolder``: ``metadata.jsonl``, one ``{"file_name", "label"}`` object per image, sorted by file name
      (like the manifest: an order that says nothing about the sources), which ``datasets.load_dataset(
      "imagefolder", data_dir=folder)`` uses for the order and the labels (it ignores ``manifest.json`` and
      hidden files). Written as it is merged: memory stays flat in the number of images.
    * ``parquet``, ``webdataset``: nothing; returns ``[]``. The Parquet files carry their schema and class names,
      and the tars their ``.json`` / ``.cls`` members. (A ``.json`` shard index would also tip Hugging Face's
      format guess for ``load_dataset(folder)`` towards its JSON loader, as ``manifest.json`` already does for a
      one-shard WebDataset release.)
    """
    check_format(fmt)
    folder = Path(folder)
    if fmt != "imagefolder":
        return []
    spill = rows if isinstance(rows, SortedSpill) and rows.key is _row_name else None
    if spill is None:
        spill = index_rows(folder)
        spill.extend(rows)

    def lines() -> Iterator[str]:
        for row in spill:
            entry = {"file_name": _check_rel(str(row["file_name"]))}
            if row.get("label") is not None:
                entry["label"] = row["label"]
            yield json.dumps(entry, sort_keys=True) + "\n"

    try:
        sha = write_chunks_atomic(folder / METADATA, lines())
    finally:
        spill.discard()
        try:
            (folder / SPILL).rmdir()  # when nothing else spilled there
        except OSError:
            pass
    return [(METADATA, sha)]


# ================================================================================================== reading
