"""Writing a mechanism's release to disk: PNGs (or records) plus ``manifest.json``, through the safe folder
writer of :mod:`privpix.publishing.staging` (staged, swapped in atomically, never touching a user's files)."""

from __future__ import annotations

import csv
import io
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from privpix.data.formats.release_layout import (  # noqa: F401  (re-exported: the public names of a release folder)
    JOURNAL,
    LOCK,
    MANIFEST,
    RECORDS,
    STAGING_PREFIX,
    listed_files,
    png_bytes,
    read_manifest,
)
from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.fileio import write_text_atomic
from privpix.mechanisms.base import Mechanism
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import RNG
from privpix.publishing.staging import (  # noqa: F401  (re-exported)
    FAULT_ENV,
    OpaqueNames,
    ReleaseWriter,
    check_no_overlap,
    check_output,
    recover,
    verify_manifest,
)
from privpix.version import __version__

# ------------------------------------------------------------------------------------------------ releases


def release_to_dir(
    mechanism: Mechanism,
    batches: Iterable[ImageSet | int],
    output: str | Path,
    rng: RNG,
    *,
    force: bool = False,
    metadata: dict[str, Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
    inputs: Sequence[str | Path] = (),
    names: OpaqueNames | None = None,
    source_map: str | Path | None = None,
    on_published: Callable[[], None] | None = None,
    note: Callable[[str], None] | None = None,
    compress_level: int = 6,
    expect: Guarantee | None = None,
) -> dict[str, Any]:
    """Release every batch and write PNGs plus ``manifest.json`` into ``output``; returns the manifest.

    For a synthesizer (``Capabilities.output == "synthetic-images"``) a batch may be a count: that many new images
    are drawn (:meth:`~privpix.mechanisms.Mechanism.synthesize`), and the manifest's ``labels`` maps each file to
    its synthetic label (the labels are part of the DP output, so they are published with the images).

    The earlier release in ``output`` (with ``force``) stays whole until the new one is complete. Files are named
    by ``names`` (opaque; fresh random names when ``None``). The manifest holds no source name; ``source_map``,
    when given, receives a CSV of (released name, source) and must lie outside ``output``. ``expect`` is the
    guarantee a ledger was charged for: a release whose guarantee differs is stopped before it is published.
    """
    out = Path(output)
    names = names or OpaqueNames()
    staged_map: Path | None = None
    sources: list[tuple[str, str]] = []
    if source_map is not None:
        check_source_map(Path(source_map), out, inputs)
    guarantee: Guarantee | None = None
    t0 = time.perf_counter()
    with ReleaseWriter(out, force=force, inputs=inputs, note=note) as writer:
        position = 0
        synthetic = mechanism.capabilities().output == "synthetic-images"
        labels: dict[str, int] = {}
        for batch in batches:
            if isinstance(batch, ImageSet) and synthetic:
                # One new image per given one, whatever the mechanism's n: the caller chose the batches (the CLI
                # passes counts from synthetic_count instead).
                rel = mechanism.synthesize(len(batch), rng, batch.shape)
            elif isinstance(batch, ImageSet):
                rel = mechanism.release(batch, rng)
            elif synthetic:
                rel = mechanism.synthesize(int(batch), rng)
            else:
                raise ParameterError(f"{mechanism.name}: draws no synthetic images; give it images to release")
            if expect is not None and rel.guarantee != expect:
                raise ParameterError(
                    f"the release's guarantee ({rel.guarantee.short()}) is not the one charged ({expect.short()})"
                )
            if guarantee is None:
                guarantee = rel.guarantee
            elif rel.guarantee != guarantee:
                raise ParameterError("images of different shapes give different guarantees; release them apart")
            imgs, srcs = rel.images.as_uint8(), rel.images.names
            drawn = rel.images.labels if synthetic else None
            del rel  # the float32 release is 4x the uint8 one: drop it before encoding
            for i, (img, src) in enumerate(zip(imgs, srcs, strict=True)):
                name = names.name(position)
                position += 1
                writer.add_image(name, img, compress_level)
                if drawn is not None:
                    labels[name] = int(drawn[i])
                if source_map is not None and not synthetic:
                    sources.append((name, str(src)))
            if on_batch is not None:
                on_batch(len(imgs))
            del imgs
        if guarantee is None:
            raise ParameterError("nothing to release: the input holds no images")
        manifest = _manifest(mechanism, guarantee, time.perf_counter() - t0, metadata)
        if synthetic:
            manifest["labels"] = dict(sorted(labels.items()))
        # The map is written in full before the release is committed, and only renamed into place after: a map
        # that cannot be written stops the release before anything is published.
        staged_map = _stage_source_map(Path(source_map), sources) if source_map is not None else None
        try:
            manifest = writer.commit(manifest, on_published)
        except BaseException:
            if staged_map is not None and not writer.committed:
                staged_map.unlink(missing_ok=True)
            raise
    if staged_map is not None:
        os.replace(staged_map, Path(source_map))
    return manifest


def release_records_to_dir(
    mechanism: Mechanism,
    records: RecordSet,
    output: str | Path,
    rng: RNG,
    *,
    force: bool = False,
    metadata: dict[str, Any] | None = None,
    on_published: Callable[[], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Release tabular records into ``output/records.csv`` plus ``manifest.json`` (same rules as images)."""
    out = Path(output)
    check_output(out, force)
    rel = mechanism.release_records(records, rng)
    if len(rel.frame) == 0:
        raise ParameterError("nothing to release: the input holds no records")
    data = rel.frame.to_csv(index=False, float_format="%.6g").encode()
    with ReleaseWriter(out, force=force, note=note) as writer:
        writer.add(RECORDS, data)
        manifest = _manifest(mechanism, rel.guarantee, rel.seconds, {**(metadata or {}), "records": len(rel.frame)})
        return writer.commit(manifest, on_published)


def _manifest(
    mechanism: Mechanism, guarantee: Guarantee, seconds: float, metadata: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "privpix_version": __version__,
        "mechanism": mechanism.name,
        "parameters": mechanism.parameters(),
        "guarantee": guarantee.to_dict(),
        "guarantee_text": guarantee.text(),
        "seconds": seconds,
        **(metadata or {}),
    }


def check_source_map(path: Path, output: str | Path, inputs: Sequence[str | Path]) -> None:
    """Refuse a ``--source-map`` that would overwrite a file, follow a link, lie in a missing folder, or sit inside
    the release (``output``) or its input."""
    check_no_overlap(path, [output], "--source-map", "the release folder --output")
    check_no_overlap(path, inputs, "--source-map", "the input")
    if path.is_symlink() or path.exists():
        raise ParameterError(f"--source-map {path}: already exists; privpix does not overwrite it (choose a new name)")
    if not path.parent.is_dir():
        raise ParameterError(f"--source-map {path}: folder {path.parent} does not exist")


def map_name(name: str) -> str:
    """A source file name as the source map writes it, losslessly, in UTF-8: a byte of the name that is not UTF-8
    (a name the OS gave as bytes) is written ``\\xNN``, and a backslash as ``\\\\``, so :func:`unmap_name` gives the
    name's exact bytes back. Every other character is written as it is."""
    raw = os.fsencode(name).replace(b"\\", b"\\\\")
    return raw.decode("utf-8", errors="backslashreplace")


def unmap_name(text: str) -> bytes:
    """The exact bytes of a name written by :func:`map_name`."""
    out, i, raw = bytearray(), 0, text.encode("utf-8")
    while i < len(raw):
        if raw[i : i + 2] == b"\\\\":
            out += b"\\"
            i += 2
        elif raw[i : i + 2] == b"\\x":
            out.append(int(raw[i + 2 : i + 4], 16))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return bytes(out)


def _stage_source_map(path: Path, rows: list[tuple[str, str]]) -> Path:
    """Write the map to a hidden temporary file beside ``path``; returns it (renamed into place after commit). Source
    names are written by :func:`map_name` (lossless, UTF-8)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["released_name", "source"])
    w.writerows(sorted((name, map_name(src)) for name, src in rows))
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        write_text_atomic(tmp, buf.getvalue())
    except OSError as exc:
        raise ParameterError(
            f"--source-map {path}: cannot write it ({exc.strerror or exc}); nothing was published"
        ) from None
    return tmp
