"""DCAConv (Wang & Chang 2020, section "DCAConv"): a supervised PCANet-like feature extractor with a small domain.

Layer r convolves every incoming map with L_r filters learnt by Discriminant Component Analysis on the
mean-removed k×k patches of the incoming maps (eqs. 45–50). After the last layer the L_R responses of each
incoming map are binarised with the Heaviside step (eq. 52) and read as an L_R-bit integer (eq. 53), which is
max-pooled. With layers (L1, L2) an image becomes L1 maps of integers in [0, 2^L2): d = 2^L2 and
m = L1 · (pooled height) · (pooled width) features.
"""

from __future__ import annotations

import numpy as np

from privpix.errors import ParameterError
from privpix.mechanisms.base import Param
from privpix.mechanisms.ldp.encoder_base import Encoder, as_gray
from privpix.privacy.grr import value_dtype


def parse_layers(text: str | tuple[int, ...]) -> tuple[int, ...]:
    """ "5,4" → (5, 4): filters per layer. "5-4" is the same, for method labels whose brackets split on commas
    (``ldp-dcaconv[layers=5-1]``)."""
    if isinstance(text, tuple):
        parts = text
    else:
        try:
            parts = tuple(int(p) for p in str(text).replace("-", ",").split(","))
        except ValueError:
            raise ParameterError(
                f"layers must be comma-separated integers such as 5,4 (or 5-4); got {text!r}"
            ) from None
    if not parts or any(p < 1 for p in parts):
        raise ParameterError(f"layers must be one or more positive integers such as 5,4; got {text!r}")
    if parts[-1] > 16:
        raise ParameterError(f"the last layer has {parts[-1]} filters: d = 2^{parts[-1]} is too large (max 16)")
    return parts


# Maps per im2col block of a fit. Its patch statistics are sums over the blocks, in block order: another block size
# would round them differently, so a fit's filters depend on it. It stays.
_CHUNK = 256
# Bytes of patches per block of a forward pass: 256 maps of 28×28 at k = 7 are 39 MB of patches, written once and
# read back by the product from memory; blocks of about 4 MB stay in the cache and take half the time (28×28 and
# 64×64, one thread). Each output is one column's product, whatever the block: the same values, bit for bit.
_CONVOLVE_BYTES = 4 << 20


def im2col_blocks(maps: np.ndarray, k: int, stride: int, chunk: int = _CHUNK):
    """Yield (start, block) over blocks of ``chunk`` maps: ``block`` is (k², m, h', w'), the zero-padded ('same'
    for stride 1) k×k patches of maps[start:start+m] laid out as columns. One reused buffer per call."""
    n, h, w = maps.shape
    a, b = (k - 1) // 2, k // 2
    oh, ow = len(range(0, h, stride)), len(range(0, w, stride))
    buf = np.empty((k * k, min(chunk, n), oh, ow), np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        xp = np.pad(maps[s : s + m], ((0, 0), (a, b), (a, b)))
        blk = buf[:, :m]
        for i in range(k):
            for j in range(k):
                blk[i * k + j] = xp[:, i : i + h : stride, j : j + w : stride]
        yield s, blk


def convolve(maps: np.ndarray, filters: np.ndarray, stride: int) -> np.ndarray:
    """Correlate each of the (n, h, w) maps with each of the (L, k²) filters: → (n, L, h', w')."""
    n_f, kk = filters.shape
    k = round(kk**0.5)
    n, h, w = maps.shape
    oh, ow = len(range(0, h, stride)), len(range(0, w, stride))
    out = np.empty((n, n_f, oh, ow), np.float32)
    chunk = max(1, min(_CHUNK, _CONVOLVE_BYTES // (kk * oh * ow * 4)))
    for s, blk in im2col_blocks(maps, k, stride, chunk):
        m = blk.shape[1]
        out[s : s + m] = (filters @ blk.reshape(kk, -1)).reshape(n_f, m, oh, ow).transpose(1, 0, 2, 3)
    return out


def _max_pool(codes: np.ndarray, pool: int, stride: int) -> np.ndarray:
    """Max over every pool×pool window (at ``stride``) of (n, c, h, w) codes: the maximum of the pool² strided
    slices, one per offset in the window. Equal to the max over a sliding-window view, about 40 times faster (a
    reduction over 2×2 windows spends its time in per-window overhead)."""
    h, w = codes.shape[2:]
    oh, ow = len(range(0, h - pool + 1, stride)), len(range(0, w - pool + 1, stride))
    out = codes[:, :, : (oh - 1) * stride + 1 : stride, : (ow - 1) * stride + 1 : stride].copy()
    for i in range(pool):
        for j in range(pool):
            if i or j:
                win = codes[:, :, i : i + (oh - 1) * stride + 1 : stride, j : j + (ow - 1) * stride + 1 : stride]
                np.maximum(out, win, out=out)
    return out


def dca_filters(
    gram: np.ndarray, class_sums: np.ndarray, class_counts: np.ndarray, n_filters: int, rho: float, rho_prime: float
) -> tuple[np.ndarray, np.ndarray]:
    """The leading ``n_filters`` discriminant components from accumulated patch statistics.

    ``gram`` = Σ e eᵀ over mean-removed patches e, ``class_sums[k]`` = Σ e over class k, ``class_counts[k]``
    the number of patches of class k. S_B and S_W are eqs. 47–48; the ridges are ρ·s and ρ′·s with s the mean
    variance per patch pixel (trace(S̄)/k²), so ``rho`` is relative and scale free. Solves the generalised
    symmetric problem S̄′ u = λ S_W′ u (the eigenvectors of (S_W′)⁻¹ S̄′, eq. 50) inside the subspace of
    zero-sum patches, where mean-removed patches live, so the constant direction can never be chosen.
    Returns filters (n_filters, k²) of unit norm and their eigenvalues.
    """
    from scipy.linalg import eigh, null_space  # on first use: every command imports this module, few fit DCA

    total = class_counts.sum()
    mu = class_sums.sum(0) / total
    mu_k = class_sums / np.maximum(class_counts, 1)[:, None]
    s_total = gram - total * np.outer(mu, mu)
    s_w = gram - (mu_k.T * class_counts) @ mu_k
    p = gram.shape[0]
    basis = null_space(np.ones((1, p)))  # (p, p-1): orthonormal basis of zero-sum vectors
    st = basis.T @ s_total @ basis
    sw = basis.T @ s_w @ basis
    scale = max(np.trace(st) / (p - 1), 1e-12)
    eye = np.eye(p - 1)
    vals, vecs = eigh(st + (rho + rho_prime) * scale * eye, sw + rho * scale * eye)
    order = np.argsort(vals)[::-1][:n_filters]
    filt = (basis @ vecs[:, order]).T
    filt /= np.linalg.norm(filt, axis=1, keepdims=True)
    # A deterministic sign: largest-magnitude coefficient positive.
    sign = np.sign(filt[np.arange(len(filt)), np.abs(filt).argmax(1)])
    return (filt * sign[:, None]).astype(np.float32), vals[order]


class DCAConvEncoder(Encoder):
    """DCAConv. Defaults as the paper's Table 1: 7×7 filters, stride 1, layers 5,4 (d = 16), 2×2 max pooling
    with stride 1. ``layers=5,1`` gives d = 2 (Table 2). Each layer may have at most as many filters as
    there are classes (the rank of the DCA signal space)."""

    name = "dcaconv"
    summary = "DCA-learnt convolution filters, binarised and max-pooled (Wang & Chang 2020's DCAConv)"
    needs_labels = True
    params = (
        Param("layers", str, "5,4", "filters per layer, separated by , or - (5-4); d = 2^(last)"),
        Param("kernel", int, 7, "filter size k (k×k)", minimum=1),
        Param("stride", int, 1, "convolution stride", minimum=1),
        Param("pool", int, 2, "max-pooling window (pool×pool); 1 = no pooling", minimum=1),
        Param("pool_stride", int, 1, "max-pooling stride", minimum=1),
        Param("rho", float, 1e-3, "ridge on S_W, relative to the mean patch variance", minimum=1e-12),
        Param("rho_prime", float, 0.0, "ridge on S_B, relative to the mean patch variance", minimum=0.0),
        Param("fit_limit", int, 0, "fit on at most this many images (seeded random subset); 0 = all", minimum=0),
    )

    def __init__(self, **params):
        super().__init__(**params)
        self.layers = parse_layers(self.config["layers"])
        self.config["layers"] = ",".join(map(str, self.layers))

    # -- forward pass -------------------------------------------------------------------------------

    def _respond(self, maps: np.ndarray, filters: np.ndarray) -> np.ndarray:
        """(n, C, h, w) maps and (L, k²) filters → (n, C·L, h', w') responses."""
        n, c, h, w = maps.shape
        out = convolve(maps.reshape(n * c, h, w), filters, self.config["stride"])
        return out.reshape(n, c * len(filters), *out.shape[2:])

    def first_layer_responses(self, images) -> np.ndarray | None:
        if not getattr(self, "filters", None):
            return None
        return convolve(as_gray(images), self.filters[0], self.config["stride"]).reshape(len(images), -1)

    def _encode(self, x: np.ndarray) -> np.ndarray:
        maps = x[:, None]
        for f in self.filters[:-1]:
            maps = self._respond(maps, f)
        n, c, h, w = maps.shape
        last = self.filters[-1]
        # Zero-sum filters: filtering the raw patch equals filtering the mean-removed patch.
        resp = convolve(maps.reshape(n * c, h, w), last, self.config["stride"])  # (n·c, L, h', w')
        codes: np.ndarray = np.zeros((n * c, *resp.shape[2:]), dtype=value_dtype(self.fitted_d()))
        for bit in range(len(last)):
            codes |= (resp[:, bit] > 0).astype(codes.dtype) << bit  # eq. 53: Σ 2^(l-1) H(·)
        codes = codes.reshape(n, c, *codes.shape[1:])
        pool, ps = self.config["pool"], self.config["pool_stride"]
        if pool > 1:
            oh, ow = codes.shape[2:]
            if pool > oh or pool > ow:
                raise ParameterError(f"pool={pool} is larger than the {oh}x{ow} maps")
            codes = _max_pool(codes, pool, ps)
        elif ps > 1:
            codes = codes[:, :, ::ps, ::ps]
        return codes.reshape(n, -1)

    # -- fitting ------------------------------------------------------------------------------------

    def _fit(self, x, labels, *, seed, progress):
        from tqdm import tqdm

        classes, y = np.unique(labels, return_inverse=True)
        for r, n_filt in enumerate(self.layers):
            if n_filt > len(classes):
                raise ParameterError(
                    f"layers: layer {r + 1} asks for {n_filt} filters but DCA gives at most one per class "
                    f"({len(classes)} classes)"
                )
        if self.config["fit_limit"] and len(x) > self.config["fit_limit"]:
            idx = np.sort(np.random.default_rng(seed).choice(len(x), self.config["fit_limit"], replace=False))
            x, y = x[idx], y[idx]
        k, stride = self.config["kernel"], self.config["stride"]
        self.d = 1 << self.layers[-1]
        self.filters: list[np.ndarray] = []
        self.eigenvalues: list[np.ndarray] = []
        onehot = np.eye(len(classes))[y]
        for r, n_filt in enumerate(self.layers):
            gram = np.zeros((k * k, k * k))
            sums = np.zeros((len(classes), k * k))
            counts = np.zeros(len(classes))
            step = 2000
            for i in tqdm(range(0, len(x), step), desc=f"DCA layer {r + 1}", disable=not progress, leave=False):
                maps = x[i : i + step, None]
                for f in self.filters:
                    maps = self._respond(maps, f)
                n, c, h, w = maps.shape
                # Patch means need no removing here: dca_filters works in the zero-sum subspace, where a
                # patch and its mean-removed version have the same coordinates.
                for s, blk in im2col_blocks(maps.reshape(n * c, h, w), k, stride):
                    m = blk.shape[1]
                    flat = blk.reshape(k * k, -1)
                    gram += flat @ flat.T
                    per_map = blk.reshape(k * k, m, -1).sum(axis=2, dtype=np.float64)  # (k², m)
                    img = i + (s + np.arange(m)) // c  # image index of each map
                    sums += onehot[img].T @ per_map.T
                    counts += onehot[img].sum(0) * blk[0, 0].size
            filt, vals = dca_filters(gram, sums, counts, n_filt, self.config["rho"], self.config["rho_prime"])
            self.filters.append(filt)
            self.eigenvalues.append(vals)

    def _state(self):
        out = {f"filters_{i}": f for i, f in enumerate(self.filters)}
        out.update({f"eigenvalues_{i}": v for i, v in enumerate(self.eigenvalues)})
        return out

    def _load_state(self, state):
        self.filters = [state[f"filters_{i}"] for i in range(len(self.layers))]
        self.eigenvalues = [state[f"eigenvalues_{i}"] for i in range(len(self.layers))]
        k = self.config["kernel"]
        for i, f in enumerate(self.filters):
            if f.shape != (self.layers[i], k * k):
                raise KeyError(f"filters_{i} (shape {f.shape}, expected {(self.layers[i], k * k)})")
