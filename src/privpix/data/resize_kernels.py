"""The compiled loop of :mod:`privpix.data.resize`: scipy's symmetric Gaussian filter, evaluated only at chosen
positions along one axis. Imported only when a resize shrinks an image (numba is not loaded otherwise).

A loop over registers, not numpy's passes over gathered copies: for a 218×178 face shrunk to 32×32, the 25-tap blur
at the 64 rows the sampling reads was 1.1 ms an image as numpy passes (a fresh copy of every tap's rows, then an
add, a multiply and an add over them) and is about a tenth of that here. The arithmetic is the same, in the same order
(numba compiles without fast-math: no reassociation, no fused multiply-add), so the values are the same bit for bit;
``tests/test_resize.py`` compares the whole resize with scikit-image's."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def blur_at(x: np.ndarray, index: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[a, p, k] = Σ_t w[t]·x[a, index[t, p], k]`` in scipy's order for a symmetric kernel ``w`` (taps, odd
    length): the centre tap first, in float64, then ``(left + right)·w`` for the pairs of taps from the outermost
    inwards; the sum is rounded to ``out``'s dtype once, as scipy's output buffer is.

    ``x``: (A, N, K) float32 or float64, C-contiguous; ``index``: (taps, P) int64, the row of ``x``'s axis 1 under
    each tap about each output position (tap ``taps // 2`` the position itself); ``out``: (A, P, K), ``x``'s dtype."""
    n_a, _, n_k = x.shape
    n_p = index.shape[1]
    radius = w.shape[0] // 2
    acc = np.empty(n_k, np.float64)
    for a in range(n_a):
        for p in range(n_p):
            centre = index[radius, p]
            wc = w[radius]
            for k in range(n_k):
                acc[k] = np.float64(x[a, centre, k]) * wc
            for j in range(radius, 0, -1):
                lo = index[radius - j, p]
                hi = index[radius + j, p]
                wj = w[radius - j]
                for k in range(n_k):
                    acc[k] += (np.float64(x[a, lo, k]) + np.float64(x[a, hi, k])) * wj
            for k in range(n_k):
                out[a, p, k] = acc[k]
