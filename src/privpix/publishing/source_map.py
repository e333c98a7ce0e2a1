"""The source map of a release (``--source-map``): a private CSV of (released name, source file name), written
beside the release, never inside it, and only once the release is committed. Names are written losslessly."""

from __future__ import annotations

import csv
import io
import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from privpix.data.formats.release_layout import SPILL
from privpix.errors import ParameterError
from privpix.fileio import write_chunks_atomic
from privpix.publishing.staging import check_no_overlap
from privpix.spill import SortedSpill


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


def source_rows(folder: Path) -> SortedSpill:
    """``(released name, source name)`` rows too many to hold (a million images): spilled to a hidden folder inside
    ``folder`` in sorted runs; give it to :func:`stage_source_map` as it is, which then sorts nothing again."""
    return SortedSpill(Path(folder) / SPILL / "sources", key=_released_name, decode=tuple)


def _released_name(row: tuple[str, str]) -> str:
    return row[0]


def stage_source_map(path: Path, rows: Iterable[tuple[str, str]]) -> Path:
    """Write the map to a hidden temporary file beside ``path``; returns it (renamed into place after commit). Rows
    are ``(released name, source name)``, in any order or as a :func:`source_rows` list (a million rows are then
    never held); the map is sorted by released name. Source names are written by :func:`map_name` (lossless,
    UTF-8)."""
    presorted = isinstance(rows, SortedSpill) and rows.key is _released_name
    ordered = rows if presorted else sorted(rows)

    def text() -> Iterator[str]:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["released_name", "source"])
        for name, src in ordered:
            w.writerow([name, map_name(src)])
            if buf.tell() > 1 << 16:
                yield buf.getvalue()
                buf.seek(0)
                buf.truncate()
        yield buf.getvalue()

    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        write_chunks_atomic(tmp, text())
    except OSError as exc:
        raise ParameterError(
            f"--source-map {path}: cannot write it ({exc.strerror or exc}); nothing was published"
        ) from None
    return tmp
