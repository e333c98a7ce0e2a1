"""scikit-image's anti-aliased resize, the same numbers bit for bit, at a fraction of its cost when shrinking.

``skimage.transform.resize(img, size, anti_aliasing=True, preserve_range=True)`` blurs the **whole** image with a
Gaussian of σ = (factor − 1) / 2 per axis (``scipy.ndimage.gaussian_filter``, mode ``mirror``, 4σ), then samples it
bilinearly (``scipy.ndimage.zoom``, ``grid_mode=True``). Shrinking a 250×250 face to 8×8 makes σ ≈ 15: a 125-tap
filter over every pixel, of which the bilinear sampling then reads two rows in thirty. That blur was 90 % of the
time to load a face data set at a small size (the LFW subset at 8×8: 33 of 36 s).

:func:`resize` blurs down the columns only at the rows the sampling reads, with scipy's own arithmetic (its
symmetric-kernel loop, the same order of additions, in float64, rounded to the image's dtype as scipy's output
buffer is: :mod:`privpix.data.resize_kernels`), then blurs those rows along their length the same way, only at the
columns the sampling reads, and lets scikit-image sample the result. Every other row and column is zero and read with
weight zero, so the output equals scikit-image's exactly (``tests/test_resize.py`` compares them bit for bit on real
faces and on random images of many shapes).
"""

from __future__ import annotations

import functools
import threading

import numpy as np

TRUNCATE = 4.0  # scipy.ndimage.gaussian_filter's default reach, which scikit-image keeps
# The largest zero-filled image a thread keeps for the next resize of its shape to its size (:func:`_zero_image`).
SCRATCH_BYTES = 16 << 20
_scratch = threading.local()


def _mirror(index: np.ndarray, n: int) -> np.ndarray:
    """scipy.ndimage's ``mirror`` extension (d c b | a b c d | c b a): reflect about the end samples, repeatedly."""
    period = 2 * n - 2
    index = np.abs(index) % period
    return np.where(index >= n, period - index, index)


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


# The kernel, the rows sampled and their taps depend on the sizes only. A data set resizes thousands of images of one
# size to one size: computed once (scipy's impulse response alone cost 30 µs an image), kept read-only.
@functools.lru_cache(maxsize=64)
def _kernel(sigma: float) -> np.ndarray:
    """scipy's Gaussian weights for ``sigma`` (read back from scipy by filtering a unit impulse: exactly its own)."""
    from scipy import ndimage as ndi

    radius = int(TRUNCATE * float(sigma) + 0.5)
    impulse = np.zeros(2 * radius + 1)
    impulse[radius] = 1.0
    return _read_only(ndi.gaussian_filter1d(impulse, sigma, mode="constant", truncate=TRUNCATE))


@functools.lru_cache(maxsize=64)
def _sampled_rows(n: int, m: int) -> np.ndarray:
    """Rows of an ``n``-row image that bilinear ``zoom(grid_mode=True)`` to ``m`` rows reads: the two about each
    sampling point, and the row beyond where the point falls within 1e-6 of a row (scipy may round its
    coordinate to either side, reading that row with a weight near zero)."""
    centre = (np.arange(m) + 0.5) * (n / m) - 0.5
    base = np.floor(centre).astype(np.int64)
    frac = centre - base
    rows = np.concatenate([base, base + 1, base[frac < 1e-6] - 1, base[frac > 1 - 1e-6] + 2])
    return _read_only(np.unique(_mirror(rows, n)))


@functools.lru_cache(maxsize=64)
def _taps(n: int, m: int, sigma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows :func:`_sampled_rows` reads, the kernel, and the mirrored row of every tap about each of them
    (taps × rows, tap ``radius`` the row itself)."""
    rows = _sampled_rows(n, m)
    w = _kernel(sigma)
    radius = len(w) // 2
    index = _mirror(rows[None, :] + np.arange(-radius, radius + 1)[:, None], n)
    return rows, w, _read_only(index)


def _blur_at(image: np.ndarray, m: int, sigma: float, axis: int = 0) -> np.ndarray:
    """``gaussian_filter1d(image, sigma, axis=axis, mode="mirror")`` at the rows (``axis=0``) or columns
    (``axis=1``) of ``image`` that a bilinear resize of that axis to ``m`` reads (:func:`_sampled_rows`), computed
    only there, with scipy's arithmetic: for a symmetric kernel its loop starts from the centre tap and adds the
    pairs of taps from the outermost inwards, in float64, and its output buffer rounds to the image's dtype."""
    from privpix.data.resize_kernels import blur_at

    _, w, index = _taps(image.shape[axis], m, sigma)
    # The filtered axis first and everything else as one long line per position, which the compiled loop runs
    # along (columns are first moved to the front: three channels a line would leave it mostly overhead).
    x = np.moveaxis(image, axis, 0)
    line = np.ascontiguousarray(x).reshape(1, x.shape[0], -1)
    out = np.empty((1, index.shape[1], line.shape[2]), image.dtype)
    blur_at(line, index, w, out)
    return np.moveaxis(out.reshape(index.shape[1], *x.shape[1:]), 0, axis)


def resize(image: np.ndarray, size: tuple[int, int], *, work: type[np.floating] = np.float32) -> np.ndarray:
    """``skimage.transform.resize(image, size, anti_aliasing=True, preserve_range=True)``, bit for bit: privpix's
    one resize, which every reader and loader calls.

    ``image`` is ``(h, w)`` or ``(h, w, c)``; the result has its channels, of height and width ``size``.

    * A float32 or float64 image is resized in its own dtype and returned in it.
    * A uint8 image is resized in ``work`` and returned as uint8, rounded to the nearest integer and clipped to
      0..255. ``np.float32`` (the default, what image folders and dataset files are read with) converts one
      channel at a time, so a large photo's float copy is one channel's; ``np.float64`` (the face loaders') converts
      the whole image at once. The two can round a pixel differently: each reader keeps its own, so its seeded
      releases keep their pixels.

    The blur runs only where the sampling reads it when the height shrinks (the costly case); otherwise
    scikit-image is called as it is."""
    if image.dtype == np.uint8:
        return _resize_uint8(image, size, work)
    return _resize_float(image, size)


def _resize_uint8(image: np.ndarray, size: tuple[int, int], work: type[np.floating]) -> np.ndarray:
    oh, ow = int(size[0]), int(size[1])
    if np.dtype(work) == np.float64:
        return np.clip(np.rint(_resize_float(image.astype(np.float64), (oh, ow))), 0, 255).astype(np.uint8)
    if np.dtype(work) != np.float32:
        raise ValueError(f"work must be np.float32 or np.float64, not {work!r}")
    if image.ndim == 2:
        return np.clip(np.rint(_resize_float(image.astype(np.float32), (oh, ow))), 0, 255).astype(np.uint8)
    out = np.empty((oh, ow, image.shape[2]), np.uint8)
    for k in range(image.shape[2]):
        out[..., k] = np.clip(np.rint(_resize_float(image[..., k].astype(np.float32), (oh, ow))), 0, 255)
    return out


def _resize_float(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from skimage.transform import resize as sk_resize

    h, w = image.shape[:2]
    oh, ow = int(size[0]), int(size[1])
    sigma_rows = max(0.0, (h / oh - 1) / 2)
    sigma_cols = max(0.0, (w / ow - 1) / 2)
    if image.dtype not in (np.float32, np.float64) or h < 2 or sigma_rows <= 1e-15:
        return sk_resize(image, (oh, ow), anti_aliasing=True, preserve_range=True)
    rows = _sampled_rows(h, oh)
    part = _blur_at(image, oh, sigma_rows)
    blurred = _zero_image(image.shape, image.dtype, (oh, ow))
    if sigma_cols > 1e-15:
        # The kept rows are whole lines: along them the blur is scipy's in the whole image, and the sampling reads
        # the same few columns of every row, so only those are blurred (the others are zero, read with weight 0).
        blurred[np.ix_(rows, _sampled_rows(w, ow))] = _blur_at(part, ow, sigma_cols, axis=1)
    else:
        blurred[rows] = part
    out = sk_resize(blurred, (oh, ow), anti_aliasing=False, preserve_range=True, clip=False)
    # scikit-image clips to the range of the image it was given: the original's, not the zero-filled one's (its
    # NaN-safe range when the image holds a NaN, as scikit-image's own clip).
    low = image.min()
    low, high = (np.nanmin(image), np.nanmax(image)) if np.isnan(low) else (low, image.max())
    np.clip(out, low, high, out=out)
    return out


def _zero_image(shape: tuple[int, ...], dtype: np.dtype, size: tuple[int, int]) -> np.ndarray:
    """An image of ``shape`` and ``dtype``, zero wherever a shrink of that shape to ``size`` does not write it: the
    one this thread used for the last such resize, whose every written value the next overwrites (the positions
    depend on the shapes only), or a fresh one. Faulting in a fresh image's pages again at every call was 60 % of the
    time to shrink a 250×250 face to 32×32 (2.5 of 4 ms); a larger image than :data:`SCRATCH_BYTES` is not kept."""
    if int(np.prod(shape)) * np.dtype(dtype).itemsize > SCRATCH_BYTES:
        # Zeros from calloc: the pages the sampling never writes stay the kernel's shared zero page.
        return np.zeros(shape, dtype)
    key = (tuple(shape), np.dtype(dtype).str, size)
    held = getattr(_scratch, "held", None)
    if held is None or held[0] != key:
        held = (key, np.zeros(shape, dtype))
        _scratch.held = held
    return held[1]
