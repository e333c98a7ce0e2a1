"""Writing a release to disk: PNG files without source metadata, and a manifest written last, atomically."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from privpix import __version__
from privpix.accounting import write_bytes_atomic, write_text_atomic
from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.guarantees import Guarantee
from privpix.mechanisms.base import Mechanism
from privpix.noise import RNG

MANIFEST = "manifest.json"


def png_bytes(image: np.ndarray) -> bytes:
    """One (h, w, c) uint8 image as PNG bytes; nothing from the source (EXIF, text chunks) is carried."""
    arr = image[..., 0] if image.shape[-1] == 1 else image
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr)).save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def _out_name(source_name: str, used: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(source_name).replace("/", "__")).strip("._") or "image"
    stem = re.sub(r"\.(png|jpe?g|pgm|gif|bmp|tiff?|webp)$", "", stem, flags=re.I)
    name, k = f"{stem}.png", 1
    while name in used:
        name, k = f"{stem}-{k}.png", k + 1
    used.add(name)
    return name


def check_output(output: Path, force: bool) -> None:
    """Refuse to overwrite an earlier release unless ``force``; never touch a folder that is not a release."""
    if output.exists() and not output.is_dir():
        raise ParameterError(f"--output {output}: exists and is not a directory")
    if output.is_dir() and any(output.iterdir()):
        if not force:
            raise ParameterError(f"--output {output}: not empty; pass --force to replace an earlier release")
        if not (output / MANIFEST).exists():
            raise ParameterError(f"--output {output}: not empty and holds no privpix manifest; refusing to touch it")


def prepare_output(output: Path, force: bool) -> None:
    check_output(output, force)
    output.mkdir(parents=True, exist_ok=True)


def release_to_dir(
    mechanism: Mechanism,
    batches: Iterable[ImageSet],
    output: str | Path,
    rng: RNG,
    *,
    force: bool = False,
    metadata: dict[str, Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Release every batch and write PNGs plus ``manifest.json`` into ``output``.

    Images go into a hidden staging folder first and are moved in only when every batch succeeded, and the
    manifest is written last with an atomic rename: an interrupted run leaves the earlier release (if any)
    intact and never a partial manifest. Returns the manifest.
    """
    out = Path(output)
    prepare_output(out, force)
    stage = out / f".privpix-staging-{int(time.time() * 1e6)}"
    stage.mkdir()
    files: list[dict[str, str]] = []
    used: set[str] = set()
    guarantee: Guarantee | None = None
    t0 = time.perf_counter()
    try:
        for batch in batches:
            rel = mechanism.release(batch, rng)
            if guarantee is None:
                guarantee = rel.guarantee
            elif rel.guarantee != guarantee:
                raise ParameterError("images of different shapes give different guarantees; release them apart")
            imgs = rel.images.as_uint8()
            for img, src in zip(imgs, rel.images.names, strict=True):
                data = png_bytes(img)
                name = _out_name(src, used)
                write_bytes_atomic(stage / name, data)
                files.append({"name": name, "sha256": hashlib.sha256(data).hexdigest(), "source": str(src)})
            if on_batch is not None:
                on_batch(len(batch))
        if guarantee is None:
            raise ParameterError("nothing to release: the input holds no images")
        # Replace an earlier release only now that the new one is complete.
        _remove_earlier_release(out)
        for f in files:
            (stage / f["name"]).replace(out / f["name"])
        return _write_manifest(out, mechanism, guarantee, time.perf_counter() - t0, metadata, files=files)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


RECORDS = "records.csv"


def release_records_to_dir(
    mechanism: Mechanism,
    records: RecordSet,
    output: str | Path,
    rng: RNG,
    *,
    force: bool = False,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Release tabular records into ``output/records.csv`` plus ``manifest.json``.

    The CSV is written atomically and the manifest last, so an interrupted run leaves an earlier release intact.
    Returns the manifest.
    """
    out = Path(output)
    rel = mechanism.release_records(records, rng)
    if len(rel.frame) == 0:
        raise ParameterError("nothing to release: the input holds no records")
    prepare_output(out, force)
    _remove_earlier_release(out)
    data = rel.frame.to_csv(index=False, float_format="%.6g").encode()
    write_bytes_atomic(out / RECORDS, data)
    files = [{"name": RECORDS, "sha256": hashlib.sha256(data).hexdigest(), "source": records.source}]
    return _write_manifest(out, mechanism, rel.guarantee, rel.seconds, metadata, records=len(rel.frame), files=files)


def _remove_earlier_release(out: Path) -> None:
    """Drop the manifest and the files of an earlier release in ``out`` (images or records)."""
    old = out / MANIFEST
    if old.exists():
        old.unlink()
        for p in [*out.glob("*.png"), out / RECORDS]:
            p.unlink(missing_ok=True)


def _write_manifest(
    out: Path,
    mechanism: Mechanism,
    guarantee: Guarantee,
    seconds: float,
    metadata: dict[str, Any] | None,
    **files_and_counts: Any,
) -> dict[str, Any]:
    """Write ``manifest.json`` last, atomically (after the metadata: ``records`` if any, then ``files``)."""
    manifest = {
        "privpix_version": __version__,
        "mechanism": mechanism.name,
        "parameters": mechanism.parameters(),
        "guarantee": guarantee.to_dict(),
        "guarantee_text": guarantee.text(),
        "seconds": seconds,
        **(metadata or {}),
        **files_and_counts,
    }
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2, default=_json_default))
    return manifest


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o)}")


def verify_manifest(output: str | Path) -> list[str]:
    """Problems found when checking every file's sha256 against the manifest (empty list: all good)."""
    out = Path(output)
    manifest = json.loads((out / MANIFEST).read_text())
    problems = []
    for f in manifest["files"]:
        p = out / f["name"]
        if not p.is_file():
            problems.append(f"{p}: missing")
        elif hashlib.sha256(p.read_bytes()).hexdigest() != f["sha256"]:
            problems.append(f"{p}: sha256 mismatch")
    return problems
