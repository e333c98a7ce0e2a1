"""Image quality of a release against its source: PSNR, SSIM (scikit-image) and Zhang, Fu & Meng 2020's entropy."""

from __future__ import annotations

import numpy as np
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from privpix.errors import ParameterError


def _pair(original: np.ndarray, released: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(original, dtype=np.float64)
    b = np.asarray(released, dtype=np.float64)
    if a.shape != b.shape:
        raise ParameterError(f"original {a.shape} and released {b.shape} must have the same shape")
    if a.ndim != 4:
        raise ParameterError(f"expected (n, h, w, c) arrays in [0, 1], got shape {a.shape}")
    return a, b


def psnr(original: np.ndarray, released: np.ndarray) -> np.ndarray:
    """PSNR in dB per image (data range 1); ``inf`` for identical images. Arrays (n, h, w, c) in [0, 1]."""
    a, b = _pair(original, released)
    out = np.empty(len(a))
    for i in range(len(a)):
        mse = np.mean((a[i] - b[i]) ** 2)
        out[i] = np.inf if mse == 0 else peak_signal_noise_ratio(a[i], b[i], data_range=1.0)
    return out


def ssim(original: np.ndarray, released: np.ndarray) -> np.ndarray:
    """Mean SSIM per image (data range 1, 7x7 window or the largest odd window that fits)."""
    a, b = _pair(original, released)
    win = min(7, a.shape[1], a.shape[2])
    win -= 1 - win % 2
    out = np.empty(len(a))
    for i in range(len(a)):
        out[i] = structural_similarity(a[i], b[i], data_range=1.0, channel_axis=2, win_size=max(win, 3))
    return out


def entropy(images: np.ndarray) -> np.ndarray:
    """Zhang, Fu & Meng 2020's information entropy H = -Σ p_i log2 p_i over the 256 grey levels, per image, in bits.

    The paper prints the sum without the minus sign; we use the standard (positive) entropy. Images
    (n, h, w, c) in [0, 1] are quantised to 8 bits first (colour images: all channels pooled).
    """
    x = np.asarray(images)
    if x.ndim != 4:
        raise ParameterError(f"expected (n, h, w, c), got shape {x.shape}")
    q = np.clip(np.rint(x * 255.0), 0, 255).astype(np.int64).reshape(len(x), -1)
    out = np.empty(len(x))
    for i, row in enumerate(q):
        p = np.bincount(row, minlength=256) / row.size
        p = p[p > 0]
        out[i] = float(-(p * np.log2(p)).sum())
    return out
