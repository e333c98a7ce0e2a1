"""ImageFolder: one PNG per image (under one folder per class when labelled) and ``metadata.jsonl``, Hugging
Face's ``imagefolder`` layout; read back from any folder of image files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.files import (
    read_image,
)
from privpix.data.folders import scan_folder
from privpix.data.formats.base import (
    METADATA,
    ImageSource,
    Item,
    Written,
    labels_array,
    pack_names,
    size_mismatch,
    unpack_names,
)
from privpix.data.formats.release_layout import CARD, JOURNAL, LOCK, MANIFEST, STAGING_PREFIX, png_bytes, read_manifest
from privpix.data.resize import resize
from privpix.errors import DataError
from privpix.fileio import start_writeback


def write_imagefolder(folder: Path, items: Sequence[Item], level: int) -> Written:
    """One shard of an ``imagefolder`` release: a PNG per item under ``folder`` (in its label's folder when it has
    one) at PNG level ``level``."""
    files, rows = [], []
    for it in items:
        rel = f"{it.label}/{it.key}.png" if it.label is not None else f"{it.key}.png"
        data = png_bytes(it.image, level)
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:  # truncates a file left by a crashed run of this shard
            fh.write(data)
            start_writeback(fh)  # synced with the rest of the shard: on disk by then, written meanwhile
        files.append((rel, hashlib.sha256(data).hexdigest()))
        rows.append({"file_name": rel, "label": it.label} if it.label is not None else {"file_name": rel})
    return Written(files, rows)


# ------------------------------------------------------------------------------------------ folders of files


class FileSource(ImageSource):
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
                img = resize(img, size, work=self._work())
            self.shape = img.shape  # type: ignore[assignment]
        else:
            self.shape = (*(size or (0, 0)), 1 if mode == "L" else 3)  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_rel"] = pack_names(self._rel)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_rel"] = unpack_names(state["_rel"], state["_n"])
        self.__dict__.update(state)

    def _work(self) -> type[np.floating]:
        # The face loaders' sources resize in float64 as the loaders themselves do, so a face read lazily has the
        # pixels of the same face loaded whole.
        return np.float64 if self._loader_resize else np.float32

    def _paths(self, start: int, stop: int) -> list[str]:
        root = self._root.resolve()
        return [str(root / r) for r in self._rel[start:stop]]

    def _fill(self, out: np.ndarray, start: int, stop: int) -> list[str]:
        names = []
        work = self._work()
        for i in range(start, stop):
            rel = str(self._rel[i])
            path = self._root / rel
            img = read_image(path, self._mode, max_pixels=self._max_pixels)
            self._put(out, i - start, img, str(path), work)
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
    release = _privpix_release(root)
    out = []
    for p, why in skipped:
        parts = p.relative_to(root).parts if p.is_relative_to(root) else ()
        top = parts[0] if parts else ""
        if len(parts) == 1 and top == METADATA:
            if used_metadata:
                continue
            why = "metadata.jsonl does not list exactly the images found, so images are read in path order"
        elif release and (
            (len(parts) == 1 and top in (MANIFEST, CARD, LOCK, JOURNAL)) or top.startswith(STAGING_PREFIX)
        ):
            continue
        out.append((p, why))
    return out


def folder_source(root: Path, size: tuple[int, int] | None, max_pixels: int | None) -> ImageSource:
    """The images of the folder ``root`` as a source (the folder rules of :func:`scan_folder`; a top-level
    ``metadata.jsonl`` that lists exactly its images gives their order), resized to ``size`` when given."""
    root, entries, skipped = scan_folder(root, max_pixels)
    mode = "L" if all(e.header.grey for e in entries) else "RGB"
    classes = sorted({e.cls for e in entries if e.cls is not None})
    by_rel = {e.path.relative_to(root).as_posix(): e for e in entries}
    rels = list(by_rel)
    order = _metadata_order(root, rels)
    if order is not None:
        rels = order
    skipped = _drop_own_files(root, skipped, used_metadata=order is not None)
    index = {c: i for i, c in enumerate(classes)}
    labels = labels_array([index[by_rel[r].cls] for r in rels]) if classes else None  # type: ignore[index]
    if size is None:
        first = by_rel[rels[0]].header
        for r in rels:
            h = by_rel[r].header
            if (h.width, h.height) != (first.width, first.height):
                raise size_mismatch(str(h.path), (h.height, h.width), str(first.path), (first.height, first.width))
    n = len(rels)
    what = f"{n:,} image{'s' if n != 1 else ''}" + (f", {len(classes)} classes" if classes else "")
    src = FileSource(
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
