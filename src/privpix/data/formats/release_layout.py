"""What a privpix release folder holds, for the code that reads one and the code that writes one.

A release folder holds ``manifest.json`` (written by privpix, with the list of files and their sha256) and the
files it lists, beside a few files of privpix's own that are not part of the release (a lock, a commit journal,
staging folders). The readers (:mod:`privpix.data.formats.imagefolder`) skip those; the writer
(:mod:`privpix.publishing.staging`) creates them. The layout lives here, below both, so that reading a release
never imports the machinery that writes one.
"""

from __future__ import annotations

import io
import json
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from PIL import Image

from privpix.errors import DataError

MANIFEST = "manifest.json"
# The dataset card every release carries (Hugging Face dataset-card YAML front matter, then plain words), listed in
# the manifest with its sha256 like every released file.
CARD = "README.md"
RECORDS = "records.csv"
LOCK = ".privpix-lock"
JOURNAL = ".privpix-commit.json"
STAGING_PREFIX = ".privpix-staging-"
# Inside a resumable (sharded) staging folder: the run's plan, and one record per finished shard.
PLAN = ".privpix-run.json"
SHARDS = ".privpix-shards"
# Inside a staging folder: lists too long to hold while a release is staged (privpix.spill), one sub-folder each.
SPILL = ".privpix-spill"
# Files privpix keeps in a release folder that are not part of the release.
OWN_FILES = {LOCK, JOURNAL}


def png_image(image: np.ndarray) -> Image.Image:
    """A Pillow image of the released pixels alone: nothing from the source (EXIF, ICC, text chunks) exists
    to be carried."""
    arr = image[..., 0] if image.shape[-1] == 1 else image
    return Image.fromarray(np.ascontiguousarray(arr))


def png_bytes(image: np.ndarray, compress_level: int = 6) -> bytes:
    """One (h, w, c) uint8 image as PNG bytes, without metadata."""
    # The release folder's own encoder: a Pillow image made from the pixels alone, so no source metadata (EXIF,
    # ICC, text) exists to be written, and Pillow writes no time chunk: same pixels, same bytes.
    buf = io.BytesIO()
    png_image(image).save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


_OWN_NAMES = frozenset((MANIFEST, *OWN_FILES))


def safe_name(name: Any, manifest: Path) -> str:
    """A manifest's file name, refused unless it is a plain relative path inside the folder, in the one form
    privpix writes (``a/b.png``: no empty or ``.`` parts, no trailing slash), and not privpix's own (a name under
    a staging folder, the lock or the journal). One spelling per file: two names for the same path let a crafted
    list visit a folder before and after a move within the same pass (the review of 2026-11-27).

    A plain name is accepted with string checks alone (a commit checks millions); only a refused one is parsed,
    to say why."""
    if isinstance(name, str) and "\\" not in name and name not in _OWN_NAMES:
        parts = name.split("/")
        if all(p and p not in (".", "..") for p in parts) and not parts[0].startswith(".privpix-"):
            return name
    if not isinstance(name, str) or not name:
        raise DataError(f"{manifest}: a file name is not a string: {name!r}")
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or "\\" in name or name in _OWN_NAMES:
        raise DataError(f"{manifest}: file name {name!r} points outside the release; refusing to touch it")
    raise DataError(
        f"{manifest}: file name {name!r} is not a plain name of a released file (privpix writes 'a/b.png', "
        "never empty or '.' parts, a trailing '/' or its own '.privpix-' files); refusing to touch it"
    )


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The privpix manifest in ``folder``, or ``None`` when there is none.

    Raises :class:`DataError` when ``manifest.json`` exists but is not a privpix manifest (another program's
    file of the same name), so such a folder is never taken for a release."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(
            f"{path}: not a privpix manifest ({type(exc).__name__}); refusing to touch the folder"
        ) from None
    if not isinstance(manifest, dict) or "privpix_version" not in manifest:
        raise DataError(f"{path}: not a privpix manifest (written by another program); refusing to touch the folder")
    return manifest


def listed_files(manifest: dict[str, Any], where: Path) -> list[tuple[str, str]]:
    """(name, sha256) of every file a privpix manifest lists, names checked to stay inside the folder."""
    mpath = where / MANIFEST
    if "files" in manifest:
        entries = manifest["files"]
        if not isinstance(entries, list):
            raise DataError(f"{mpath}: 'files' is not a list")
        pairs = [(e.get("name"), e.get("sha256")) if isinstance(e, dict) else (None, None) for e in entries]
    elif "file" in manifest:  # an LDP report folder: one file
        pairs = [(manifest.get("file"), manifest.get("sha256"))]
    else:
        raise DataError(f"{mpath}: lists no files")
    out = []
    for name, sha in pairs:
        if not isinstance(sha, str):
            raise DataError(f"{mpath}: file {name!r} has no sha256")
        out.append((safe_name(name, mpath), sha))
    return out
