"""Parquet shards holding Hugging Face's ``Image`` struct (PNG bytes and a path) and a ``ClassLabel``; read back
by row group, from privpix's shards or any Parquet file with an image column."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.files import (
    one_line,
)
from privpix.data.formats.base import (
    PARQUET_ROW_GROUP,
    ContainerSource,
    Headers,
    ImageSource,
    Item,
    Written,
    decode_bytes,
    encode_labels,
)
from privpix.data.formats.release_layout import png_bytes
from privpix.errors import DataError
from privpix.fileio import sha256_file


def _hf_features(labelled: bool, names: tuple[str, ...] | None) -> dict[str, Any]:
    features: dict[str, Any] = {"image": {"_type": "Image"}}
    if labelled:
        if names is not None:
            features["label"] = {"names": list(names), "_type": "ClassLabel"}
        else:
            features["label"] = {"dtype": "string", "_type": "Value"}
    features["key"] = {"dtype": "string", "_type": "Value"}
    return features


def write_parquet(
    folder: Path, rel: str, items: Sequence[Item], level: int, names: tuple[str, ...] | None, labelled: bool
) -> Written:
    """One shard of a ``parquet`` release: the file ``rel`` under ``folder`` holding the items' PNGs (level
    ``level``) and, when ``labelled``, their labels (indexes into ``names`` when given, else strings)."""
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
                    [{"bytes": png_bytes(it.image, level), "path": f"{it.key}.png"} for it in chunk], type=image_type
                )
            }
            if labelled:
                # A labelled release labels every item (write_shard's contract); str() only tells the checker so.
                labels = [index[str(it.label)] for it in chunk] if index is not None else [it.label for it in chunk]
                cols["label"] = pa.array(labels, type=schema.field("label").type)
            cols["key"] = pa.array([it.key for it in chunk], type=pa.string())
            w.write_table(pa.table(cols, schema=schema), row_group_size=PARQUET_ROW_GROUP)
            for it in chunk:
                row = {"file_name": rel, "key": it.key}
                if it.label is not None:
                    row["label"] = it.label
                rows.append(row)
    return Written([(rel, sha256_file(path))], rows)


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


class _ParquetSource(ContainerSource):
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
                    raise DataError(f"{path}: row group {rg} cannot be read ({one_line(exc)})") from None
                if len(cells) != count:
                    raise DataError(f"{path}: row group {rg} changed since the source was opened")
                for row in range(max(start, first), min(stop, first + count)):
                    local = row - first + file_first
                    data = cells[row - first]
                    if data is None:
                        raise DataError(
                            f"{path}#{local}: the image has no bytes (an image stored by path is not supported)"
                        )
                    img = decode_bytes(data, f"{path}#{local}", self._mode, self._max_pixels)
                    self._put(out, row - start, img, f"{path}#{local}")
                    names.append(f"{rel}#{local}")
        finally:
            for pf in opened.values():
                pf.close()
        return names


def parquet_source(paths: list[Path], root: Path, size: tuple[int, int] | None, max_pixels: int | None) -> ImageSource:
    """The images of the Parquet files ``paths`` (under ``root``) as one source, resized to ``size`` when given."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files: list[tuple[str, str]] = []
    groups: list[tuple[int, int, int, int, int]] = []
    image = label = None
    class_names: tuple[str, ...] | None = None
    label_type = None
    raw_labels: list[Any] = []
    headers = Headers(size, max_pixels)
    total = 0
    for fi, path in enumerate(paths):
        rel = path.name if path == root else path.relative_to(root).as_posix()
        try:
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{path}: not a readable Parquet file ({one_line(exc)})") from None
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
                    raise DataError(f"{path}: row group {rg} cannot be read ({one_line(exc)})") from None
                groups.append((fi, rg, total, count, in_file))
                total += count
                in_file += count
    if total == 0:
        raise DataError(f"{root}: the Parquet file(s) hold no rows")
    labels, class_names = encode_labels(raw_labels, class_names, label_type, root) if label else (None, None)
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
