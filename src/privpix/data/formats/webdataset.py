"""WebDataset tar shards: ``KEY.png`` and ``KEY.cls`` per image (webdataset's grouping by key); read back from
privpix's shards or any tar of images with ``.cls`` or ``.json`` labels."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.files import IMAGE_EXTENSIONS, one_line
from privpix.data.formats.base import (
    ContainerSource,
    Headers,
    ImageSource,
    Item,
    Written,
    decode_bytes,
    encode_labels,
    labels_array,
    pack_names,
    unpack_names,
)
from privpix.data.formats.release_layout import png_bytes
from privpix.errors import DataError
from privpix.fileio import sha256_file

# webdataset's grouping rule (tariterators.base_plus_ext): the key is everything before the first dot of the
# file name, the extension everything after it.
_WDS_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_IMAGE_EXTS = {e.lstrip(".") for e in IMAGE_EXTENSIONS}


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


def write_tar(folder: Path, rel: str, items: Sequence[Item], level: int, names: tuple[str, ...] | None) -> Written:
    """One shard of a ``webdataset`` release: the tar ``rel`` under ``folder`` with ``KEY.png`` (level ``level``)
    and, for a labelled item, ``KEY.cls`` (its index into ``names`` when given)."""
    index = {n: i for i, n in enumerate(names)} if names is not None else None
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(path, "wb") as fh, tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for it in items:
            _tar_member(tar, f"{it.key}.png", png_bytes(it.image, level))
            row = {"file_name": rel, "key": it.key}
            if it.label is not None:
                if index is not None:
                    _tar_member(tar, f"{it.key}.cls", str(index[it.label]).encode())
                _tar_member(tar, f"{it.key}.json", json.dumps({"label": it.label}, sort_keys=True).encode())
                row["label"] = it.label
            rows.append(row)
    return Written([(rel, sha256_file(path))], rows)


# ------------------------------------------------------------------------------------------------- tars


class _TarSource(ContainerSource):
    """Samples of WebDataset tar shards, read from the member offsets indexed at open."""

    def __init__(self, tars: list[tuple[str, str]], index: np.ndarray, keys: list[str], **settings: Any) -> None:
        super().__init__(tars, **settings)
        self._index = index  # per sample: tar index, data offset, data size
        self._keys = list(keys)
        self._n = len(keys)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_keys"] = pack_names(self._keys)
        # Offsets and sizes are mostly zero high bytes: compressed, about 8 bytes a sample instead of 24.
        state["_index"] = zlib.compress(np.ascontiguousarray(self._index, dtype="<i8").tobytes(), 1)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_keys"] = unpack_names(state["_keys"], state["_n"])
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
                self._put(out, i - start, decode_bytes(data, full, self._mode, self._max_pixels), full)
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


def tar_source(paths: list[Path], root: Path, size: tuple[int, int] | None, max_pixels: int | None) -> ImageSource:
    """The images of the tar files ``paths`` (under ``root``), grouped by key as webdataset groups them, as one
    source, resized to ``size`` when given."""
    tars: list[tuple[str, str]] = []
    index: list[tuple[int, int, int]] = []
    keys: list[str] = []
    cls_values: list[int | None] = []
    json_values: list[Any] = []
    skipped: list[tuple[str, str]] = []
    headers = Headers(size, max_pixels)

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
        key: str | None = None
        members: dict[str, tuple[int, int, bytes | None]] = {}
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
                f"{path}: not a plain (uncompressed) tar file ({one_line(exc)}); WebDataset shards are read by "
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
        return encode_labels(json_values, None, None, where)
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
    return labels_array(vals), tuple(names.get(i, str(i)) for i in range(top + 1))
