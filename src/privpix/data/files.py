"""Readers for the on-disk formats (IDX, PGM/GIF/JPEG/PNG/TIFF/... image files) with errors that name the file.

Image files are decoded the way a viewer shows them; docs/decoding.md has the table (modes, bit depths,
transparency, orientation, frames) and the rule that picks one colour mode for a whole set.
"""

from __future__ import annotations

import gzip
import os
import struct
import threading
import warnings
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from privpix.errors import DataError, ParameterError

IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".pgm", ".ppm", ".pbm", ".gif", ".bmp", ".tif", ".tiff", ".webp"}

DEFAULT_MAX_PIXELS = 150_000_000
"""Pixels (width × height) one image may declare; checked from the header before anything is decoded. A
12000×12000 photo (144 M) passes, 13000×13000 (169 M) does not."""

# Modes whose pixels are one grey value (with or without alpha).
_GREY_MODES = {"1", "L", "LA", "La", "I", "F", "I;16", "I;16L", "I;16B", "I;16N"}
_ALPHA_MODES = {"LA", "La", "PA", "RGBA", "RGBa"}
_I16_MODES = {"I;16", "I;16L", "I;16B", "I;16N"}
# Rows are converted in strips of about this many pixels, so a conversion never holds a second full copy.
_STRIP_PIXELS = 1 << 22
# What Pillow raises on a file it cannot decode (plugins are not consistent about it).
DECODE_ERRORS = (
    UnidentifiedImageError,
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    KeyError,
    TypeError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)
# Pillow's decompression-bomb limit is a module global; it is swapped for ours only while we open or decode.
_PIL_LIMIT_LOCK = threading.RLock()


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


# ------------------------------------------------------------------------------------------ opening safely


def check_max_pixels(max_pixels: int | None) -> int | None:
    """``max_pixels`` as an int >= 1, or ``None`` (no limit)."""
    if max_pixels is None:
        return None
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int | np.integer) or max_pixels < 1:
        raise ParameterError(f"max_pixels must be a positive integer (pixels per image), got {max_pixels!r}")
    return int(max_pixels)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line of at most 200 characters (its type's name when it has none), for
    messages that name a file beside it."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


@contextmanager
def pillow_limit(limit: int | None) -> Iterator[None]:
    """Pillow's own bomb check set to ``limit`` (``None``: off) and its warning silenced, for this block only:
    our check (from the header, with a message naming the file) is the one in force, and nothing outside the
    block sees a changed global."""
    with _PIL_LIMIT_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = limit
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                # Pillow's other warnings (truncated TIFF tags, palette hints) are about metadata we do not use;
                # printed, they would break the one-line error contract of the CLI.
                warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
                yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def _too_large(path: str | os.PathLike, size: tuple[int, int], max_pixels: int) -> DataError:
    w, h = size
    return DataError(
        f"{path}: declares {w}x{h} = {w * h:,} pixels, over the limit of {max_pixels:,} pixels per image; "
        "raise it with --max-pixels N (max_pixels=N) if the file is trusted"
    )


@contextmanager
def open_image(path: str | os.PathLike, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Iterator[Image.Image]:
    """The image at ``path`` opened lazily (header only), its declared size checked against ``max_pixels``.

    Decode inside the ``with`` block: Pillow's decompression-bomb check is lifted while the header is read (so
    a huge declared size reaches our one-line error instead of Pillow's exception) and then set to
    ``max_pixels`` for the decoding; the global is restored on exit. Raises :class:`DataError` naming the file.
    """
    path = Path(path)
    max_pixels = check_max_pixels(max_pixels)
    with pillow_limit(None):
        try:
            im: Image.Image = Image.open(path)
        except FileNotFoundError:
            raise DataError(f"{path}: missing; expected an image file") from None
        except IsADirectoryError:
            raise DataError(f"{path}: is a folder, expected an image file") from None
        except PermissionError:
            raise DataError(f"{path}: cannot be read (permission denied)") from None
        except DECODE_ERRORS as exc:
            raise DataError(f"{path}: not a readable image ({one_line(exc)})") from None
    with checked_size(im, path, max_pixels) as im:
        yield im


@contextmanager
def checked_size(im: Image.Image, name: str | os.PathLike, max_pixels: int | None) -> Iterator[Image.Image]:
    """An image opened header-only (from a file or from bytes), its declared size refused when empty or over
    ``max_pixels`` (an error naming ``name``), and Pillow's own limit set to ``max_pixels`` while it decodes."""
    with im:
        w, h = im.size
        if w < 1 or h < 1:
            raise DataError(f"{name}: declares {w}x{h} pixels; an image needs at least one")
        if max_pixels is not None and w * h > max_pixels:
            raise _too_large(name, (w, h), max_pixels)
        with pillow_limit(max_pixels):
            yield im


# ---------------------------------------------------------------------------------------- header facts


def _palette_rgb(im: Image.Image) -> np.ndarray:
    """The palette of a P/PA image as (k, 3) uint8, from the header when Pillow has it there."""
    pal = im.palette
    if pal is not None and pal.rawmode is None and pal.mode in ("RGB", "RGBA"):
        k = len(pal.mode)
        raw = np.frombuffer(bytes(pal.palette), np.uint8)
        return raw[: raw.size // k * k].reshape(-1, k)[:, :3]
    # TIFF colour maps and BMP palettes are kept raw until the image loads; the pixels are small (1 byte each).
    return np.asarray(im.getpalette("RGB") or [], np.uint8).reshape(-1, 3)


def is_grey(im: Image.Image) -> bool:
    """Whether an opened image is grey from its header: a grey mode, a palette of greys only, or a PNG stored
    as grey + alpha (which Pillow hands out as RGBA)."""
    if im.mode in _GREY_MODES:
        return True
    if im.mode in ("P", "PA"):
        rgb = _palette_rgb(im)
        return bool(rgb.size) and bool(np.all(rgb == rgb[:, :1]))
    png = getattr(im, "png", None)
    return im.mode == "RGBA" and str(getattr(png, "im_rawmode", "")).startswith("LA")


@dataclass(frozen=True)
class ImageHeader:
    """What an image file declares, read without decoding its pixels."""

    path: Path
    format: str | None
    mode: str
    width: int
    height: int
    grey: bool


def read_header(path: str | os.PathLike, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> ImageHeader:
    """Format, mode, declared size and greyness of one image file (:class:`DataError` if unreadable or over
    ``max_pixels``)."""
    path = Path(path)
    with open_image(path, max_pixels) as im:
        try:
            grey = is_grey(im)
        except DECODE_ERRORS as exc:
            raise DataError(f"{path}: not a readable image ({one_line(exc)})") from None
        return ImageHeader(path, im.format, im.mode, im.size[0], im.size[1], grey)


def set_mode(files: Iterable[Path | str | tuple], *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> str:
    """The colour mode for a whole set: ``'L'`` when every file is grey by its header (grey modes, greys-only
    palettes), else ``'RGB'``. Accepts paths or the ``(path, class)`` pairs of ``list_image_files``; reads
    headers only. Decided for the set, not per file, so the order of the files never changes the result."""
    for f in files:
        path = f[0] if isinstance(f, tuple) else f
        if not read_header(path, max_pixels).grey:
            return "RGB"
    return "L"


# ------------------------------------------------------------------------------------------- decoding


def _over_white(colour: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Composite on white, rounded to nearest: c·a/255 + 255·(1 − a/255). Exact in uint16 (≤ 65152)."""
    c = colour.astype(np.uint16)
    a = alpha.astype(np.uint16)[..., None]
    return ((c * a + 255 * (255 - a) + 127) // 255).astype(np.uint8)


def _int_white(im: Image.Image) -> int:
    """The white level of a 32-bit 'I' image: the full range its header declares (TIFF BitsPerSample and
    SampleFormat; 16-bit PGM/PNG, which Pillow scales to 0–65535); 2**31 − 1 when nothing says otherwise."""
    if im.format in ("PPM", "PNG"):
        return 65535
    tags = getattr(im, "tag_v2", None)
    if tags is not None:
        bits = tags.get(258, (32,))
        bits = int(bits[0] if isinstance(bits, tuple) else bits)
        fmt = tags.get(339, 1)
        signed = int(fmt[0] if isinstance(fmt, tuple) else fmt) == 2
        if 1 <= bits <= 32:
            return (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    return (1 << 31) - 1


def _grey_levels(strip: Image.Image, white: int) -> np.ndarray:
    """16/32-bit integer and float greys scaled to 0–255 by their declared range (never clipped at 255)."""
    mode = strip.mode
    if mode in _I16_MODES:
        v = np.asarray(strip).astype(np.uint32)
        out = ((v * 255 + 32767) // 65535).astype(np.uint8)
    elif mode == "I":
        v = np.clip(np.asarray(strip).astype(np.int64), 0, white)
        out = ((v * 255 + white // 2) // white).astype(np.uint8)
    else:  # F: the float convention of TIFF and image editors, 0.0 black, 1.0 white
        v = np.nan_to_num(np.asarray(strip, dtype=np.float32), nan=0.0, posinf=1.0, neginf=0.0)
        out = np.rint(np.clip(v, 0.0, 1.0) * 255.0).astype(np.uint8)
    key = strip.info.get("transparency")
    if isinstance(key, int):  # a tRNS grey key: those pixels are transparent, i.e. white
        out[np.asarray(strip) == key] = 255
    return out


def _convert_strip(strip: Image.Image, mode: str, white: int) -> np.ndarray:
    """One strip of an image as (rows, w, 1 or 3) uint8 in ``mode`` ('L' or 'RGB'), as a viewer shows it."""
    src = strip.mode
    if src in _I16_MODES or src in ("I", "F"):
        grey = _grey_levels(strip, white)
    elif src in _ALPHA_MODES or "transparency" in strip.info or (src == "P" and _palette_has_alpha(strip)):
        work = "LA" if src in ("1", "L", "LA", "La") else "RGBA"
        a = np.asarray(strip.convert(work))
        flat = _over_white(a[..., :-1], a[..., -1])
        if work == "LA":
            grey = flat[..., 0]
        elif mode == "L":
            grey = np.asarray(Image.fromarray(flat, "RGB").convert("L"))
        else:
            return flat
    elif mode == "L" or src in ("1", "L"):
        grey = np.asarray(strip.convert("L"))
    else:  # P, RGB, RGBX, CMYK, YCbCr, LAB (through littleCMS), HSV
        return np.asarray(strip.convert("RGB"))
    return grey[..., None] if mode == "L" else np.repeat(grey[..., None], 3, axis=2)


def _palette_has_alpha(im: Image.Image) -> bool:
    return im.palette is not None and im.palette.mode == "RGBA"


def _orient(im: Image.Image) -> None:
    """Apply the EXIF orientation in place. A broken EXIF block is ignored, as viewers ignore it."""
    try:
        orientation = im.getexif().get(0x0112, 1)
    except Exception:  # any parse failure of optional metadata means "no orientation"
        return
    if orientation in (2, 3, 4, 5, 6, 7, 8):
        ImageOps.exif_transpose(im, in_place=True)


def read_image(
    path: str | os.PathLike, mode: str | None = None, *, max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> np.ndarray:
    """One image file as uint8 ``(h, w, c)``, as a viewer shows it (see docs/decoding.md).

    ``mode`` 'L' or 'RGB' converts; ``None`` gives 'L' for a grey file and 'RGB' otherwise. The declared size
    is checked against ``max_pixels`` before decoding (``None``: no limit). The first frame of an animation.
    """
    path = Path(path)
    if mode not in (None, "L", "RGB"):
        raise ParameterError(f"mode must be 'L', 'RGB' or None, got {mode!r}")
    with open_image(path, max_pixels) as im:
        return decode_opened(im, mode, path)


def decode_opened(im: Image.Image, mode: str | None, name: str | os.PathLike) -> np.ndarray:
    """An opened image (its size already checked) as uint8 ``(h, w, c)``: the decoding of :func:`read_image`,
    shared by every reader (files, Parquet bytes, tar members). ``name`` is what an error names."""
    try:
        if mode is None:
            mode = "L" if is_grey(im) else "RGB"
        white = _int_white(im) if im.mode == "I" else 0
        im.load()
        _orient(im)
        w, h = im.size
        out = np.empty((h, w, 1 if mode == "L" else 3), np.uint8)
        rows = max(1, _STRIP_PIXELS // w)
        if rows >= h:
            out[:] = _convert_strip(im, mode, white)
        else:
            for y0 in range(0, h, rows):
                y1 = min(h, y0 + rows)
                out[y0:y1] = _convert_strip(im.crop((0, y0, w, y1)), mode, white)
    except DECODE_ERRORS as exc:
        raise DataError(f"{name}: not a readable image ({one_line(exc)})") from None
    return out


def is_image_file(path: Path) -> bool:
    """True for known image extensions, and for extension-less files that Pillow identifies (Yale)."""
    if path.name.startswith("."):
        return False
    if path.suffix.lower() in IMAGE_EXTENSIONS:
        return True
    # Names like Yale's "subject01.glasses" have no real extension: let Pillow decide.
    try:
        with pillow_limit(None), Image.open(path) as im:
            return im.format is not None
    except DECODE_ERRORS:
        return False
