"""Readers for the on-disk formats (IDX, PGM/GIF/JPEG/PNG image files) with errors that name the file."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from privpix.errors import DataError

IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".pgm", ".ppm", ".pbm", ".gif", ".bmp", ".tif", ".tiff", ".webp"}


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DataError(f"{path}: missing; expected {what}")
    return path


def read_idx(path: Path, expected_ndim: int) -> np.ndarray:
    """An IDX file (optionally gzip-compressed) as an array; ``expected_ndim`` 3 for images, 1 for labels."""
    require_file(path, f"an IDX file with {expected_ndim} dimension(s)")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read as a gzip IDX file ({exc})") from None
    if len(raw) < 4:
        raise DataError(f"{path}: truncated; expected an IDX header")
    zero, dtype_code, ndim = raw[0:2], raw[2], raw[3]
    if zero != b"\x00\x00" or dtype_code != 0x08 or ndim != expected_ndim:
        raise DataError(
            f"{path}: bad IDX header (type 0x{dtype_code:02x}, {ndim} dims); "
            f"expected unsigned-byte data with {expected_ndim} dims"
        )
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = raw[4 + 4 * ndim :]
    if len(body) != int(np.prod(dims)):
        raise DataError(f"{path}: holds {len(body)} data bytes, header promises {int(np.prod(dims))}")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def read_image(path: Path, mode: str | None = None) -> np.ndarray:
    """One image file as uint8 ``(h, w, c)``; ``mode`` 'L' or 'RGB' converts, ``None`` keeps L or RGB."""
    try:
        with Image.open(path) as im:
            im.load()
            if mode is None:
                mode = "L" if im.mode in ("L", "1", "I;16", "I", "F") else "RGB"
                if im.mode == "P":
                    rgb = im.convert("RGB")
                    arr = np.asarray(rgb)
                    if np.array_equal(arr[..., 0], arr[..., 1]) and np.array_equal(arr[..., 1], arr[..., 2]):
                        mode = "L"
            arr = np.asarray(im.convert(mode))
    except FileNotFoundError:
        raise DataError(f"{path}: missing; expected an image file") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DataError(f"{path}: not a readable image ({exc})") from None
    if arr.ndim == 2:
        arr = arr[..., None]
    return arr


def is_image_file(path: Path) -> bool:
    """True for known image extensions, and for extension-less files that Pillow identifies (Yale)."""
    if path.name.startswith("."):
        return False
    if path.suffix.lower() in IMAGE_EXTENSIONS:
        return True
    # Names like Yale's "subject01.glasses" have no real extension: let Pillow decide.
    try:
        with Image.open(path) as im:
            return im.format is not None
    except (UnidentifiedImageError, OSError):
        return False
