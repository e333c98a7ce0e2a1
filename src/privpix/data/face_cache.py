"""A cache on disk of the named data sets' faces as read at a size (CelebA, LFW), kept between processes.

Decoding a face JPEG and resizing it costs about 2 ms: a command that fits on CelebA with LFW as its public set reads
thousands of faces before it does anything else (9 s of a 21 s ``privpix release`` on 120 faces with
``public=lfw-gender-crop``), and the next command reads them again. :func:`privpix.data.loaders.read_resized` keeps
each face in the process; this module keeps it on disk as well, when asked to.

Off unless ``PRIVPIX_CACHE`` names a folder. It then holds one ``.npy`` file per face and size (a 32×32 RGB face:
3 KB; all 202,599 CelebA faces at 64×64: 2.5 GB). Only faces of the named research data sets read through
``read_resized`` are kept there, never the images of a user's own folder (``--input``), which may be private and
should not be copied where nobody asked. Delete the folder whenever you like.

An entry is found by the file's path, modification time and size, the size read at, the crop, and the code that
decodes and resizes (the source of :mod:`privpix.data.files` and :mod:`privpix.data.resize`, and Pillow's version):
a changed file or a changed decoder reads the face again. Writes are atomic (a temporary file renamed into place),
so processes may share the folder; an unreadable entry is read from its file again and replaced.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
from pathlib import Path

import numpy as np

from privpix.fileio import write_bytes_atomic

CACHE_ENV = "PRIVPIX_CACHE"


def cache_dir() -> Path | None:
    """The cache folder ``$PRIVPIX_CACHE``, or None (no cache) when it is unset or empty."""
    value = os.environ.get(CACHE_ENV, "").strip()
    return Path(value).expanduser() / "faces" if value else None


@functools.cache
def _code_version() -> bytes:
    import PIL

    from privpix.data import files, resize

    digest = hashlib.sha256(str(PIL.__version__).encode())
    for module in (files, resize):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.digest()


def _entry(folder: Path, key: tuple) -> Path:
    name = hashlib.sha256(_code_version() + repr(key).encode()).hexdigest()
    return folder / name[:2] / f"{name}.npy"


def load(key: tuple, shape: tuple[int, ...]) -> np.ndarray | None:
    """The face stored under ``key`` when it is there and is a uint8 array of ``shape``, else None."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        img = np.load(_entry(folder, key), allow_pickle=False)
    except (OSError, ValueError, EOFError):  # absent, or torn by a crash: read the face again
        return None
    return img if img.dtype == np.uint8 and img.shape == shape else None


def store(key: tuple, img: np.ndarray) -> None:
    """Keep ``img`` under ``key``. A cache that cannot be written (read-only, full) is skipped, not an error: the
    command still has the face."""
    folder = cache_dir()
    if folder is None:
        return
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(img), allow_pickle=False)
    try:
        write_bytes_atomic(_entry(folder, key), buf.getvalue(), durable=False)
    except OSError:
        return
