"""Encoders: map a grayscale image to an integer feature vector in ``[d]^m`` that an owner perturbs with GRR.

The data user fits an encoder (on public or consented images), saves it with :meth:`Encoder.save`, and hands
the file to the data owners; each owner loads it with :func:`load_encoder`, encodes their own image and
perturbs the result (:mod:`privpix.mechanisms.ldp.reports`). The encoder file holds everything needed to
encode (filters, vocabulary, scaler) and a note of the data it was fitted on, because that data is not
protected by the owners' perturbation.

This module is the registry's front: :func:`make_encoder` and :func:`load_encoder`, and the two baseline
encoders (pixel, HOG-BoVW). The base class and the read-only registry :data:`ENCODERS` are in
:mod:`~privpix.mechanisms.ldp.encoder_base`, which the encoder modules import; they never import this one. An
encoder is registered by the LDP feature mechanism that wraps it (:mod:`~privpix.mechanisms.ldp.mechanism`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from privpix.errors import DataError, ParameterError
from privpix.mechanisms.base import Param
from privpix.mechanisms.ldp.encoder_base import ENCODERS, FORMAT, Encoder, as_gray
from privpix.privacy.grr import value_dtype

__all__ = [
    "ENCODERS",
    "FORMAT",
    "MAX_IMAGE_PIXELS",
    "Encoder",
    "HogBovwEncoder",
    "PixelEncoder",
    "as_gray",
    "load_encoder",
    "make_encoder",
]


def make_encoder(name: str, **params: Any) -> Encoder:
    """An unfitted encoder by registered name (``pixel``, ``hog-bovw``, ``dcaconv``, ``bnn``)."""
    known = ENCODERS.providers()
    if name not in known:
        raise ParameterError(f"encoder: unknown name {name!r}; known: {', '.join(sorted(known))}")
    return known[name][1](**params)


# An encoder file names the image size owners must resize to; beyond this it is corrupt (or hostile), and
# believing it would mean allocating gigabytes before anything could notice.
MAX_IMAGE_PIXELS = 8192 * 8192


def load_encoder(path: str | Path) -> Encoder:
    """Load an encoder file written by :meth:`Encoder.save`.

    Anything that is not such a file (truncated, another npz, inconsistent arrays) raises :class:`DataError`
    naming ``path``: the file comes from another party, so it is checked, down to encoding one blank image."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: encoder file not found")
    with path.open("rb") as f:
        # np.load's own message for a non-zip file suggests allow_pickle, which must never be followed here.
        if f.read(2) != b"PK":  # every zip starts so
            raise DataError(f"{path}: not a privpix encoder file (not an .npz archive)")
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            state = {k[len("state_") :]: z[k] for k in z.files if k.startswith("state_")}
            digests = z["fit_digests"] if "fit_digests" in z.files else np.zeros((0, 32), np.uint8)
    except MemoryError:
        raise
    except Exception as exc:  # zip, zlib, npy and JSON parsers each raise their own kinds
        raise DataError(f"{path}: not a privpix encoder file ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fmt = meta.get("format") if isinstance(meta, dict) else None
        raise DataError(f"{path}: not a privpix encoder file (format {fmt!r}, expected {FORMAT!r})")
    known = ENCODERS.providers()
    if meta.get("encoder") not in known:
        raise DataError(f"{path}: unknown encoder {meta.get('encoder')!r}; known: {', '.join(sorted(known))}")
    try:
        if not isinstance(meta["config"], dict):
            raise TypeError(f"config is {type(meta['config']).__name__}, not an object")
        enc = known[meta["encoder"]][1](**meta["config"])
        enc.d = int(meta["d"])
        h, w = (int(v) for v in meta["image_shape"])
        enc.image_shape = (h, w)
        enc.n_features = int(meta["n_features"])
        enc.fitted_on = str(meta["fitted_on"])
        enc.fit_seconds = float(meta.get("fit_seconds", 0.0))
        if digests.dtype != np.uint8 or digests.ndim != 2 or digests.shape[1] != 32:
            raise ValueError(f"fit_digests has shape {digests.shape} and dtype {digests.dtype}, not (n, 32) uint8")
        enc.fit_digests = frozenset(bytes(row) for row in digests)
        if enc.d < 2 or enc.n_features < 1 or h < 1 or w < 1 or h * w > MAX_IMAGE_PIXELS:
            raise ValueError(f"d = {enc.d}, m = {enc.n_features}, image size {h}x{w} are out of range")
        enc._load_state(state)
    except KeyError as exc:
        raise DataError(f"{path}: encoder file is missing {exc.args[0]!r}") from None
    except (TypeError, ValueError, RuntimeError, IndexError) as exc:  # ValueError covers ParameterError
        raise DataError(f"{path}: not a valid privpix encoder file ({exc})") from None
    try:
        probe = enc._encode(np.zeros((1, h, w), np.float32))
        ok = probe.shape == (1, enc.n_features) and int(probe.min()) >= 0 and int(probe.max()) < enc.d
    except MemoryError:
        raise
    except Exception as exc:  # a corrupt array can fail inside numpy, scikit-learn or torch
        raise DataError(f"{path}: encoder file is inconsistent ({type(exc).__name__}: {exc})") from None
    if not ok:
        raise DataError(
            f"{path}: encoder file is inconsistent: it encodes a {h}x{w} image to {probe.shape[1]} features, "
            f"not the m = {enc.n_features} in [0, {enc.d}) it declares"
        )
    return enc


# ------------------------------------------------------------------------------------------------ pixel


class PixelEncoder(Encoder):
    """The paper's raw-pixel baseline: each pixel cut into d equal-width levels.

    ``scaling="fixed"`` bins the pixel range [0, 1] (no fitting data at all: the encoder reveals nothing);
    ``scaling="minmax"`` first rescales each pixel position by the min and max seen in the fitting data,
    as the paper's scikit-learn ``MinMaxScaler`` does.
    """

    name = "pixel"
    summary = "raw pixels quantised to d levels (Wang & Chang 2020's pixel baseline)"
    params = (
        Param("levels", int, 16, "domain size d: number of levels per pixel", minimum=2),
        Param(
            "scaling",
            str,
            "fixed",
            "fixed: bin [0, 1]; minmax: per-pixel min/max of the fitting data",
            choices=("fixed", "minmax"),
        ),
    )

    def _fit(self, x, labels, *, seed, progress):
        self.d = int(self.config["levels"])
        if self.config["scaling"] == "minmax":
            self.lo = x.reshape(len(x), -1).min(axis=0)
            self.hi = x.reshape(len(x), -1).max(axis=0)
        else:
            self.lo = np.zeros(x.shape[1] * x.shape[2], np.float32)
            self.hi = np.ones(x.shape[1] * x.shape[2], np.float32)

    @property
    def uses_fitting_data(self) -> bool:
        return self.config["scaling"] != "fixed"

    def fit_unsupervised_shape(self, height: int, width: int) -> PixelEncoder:
        """A fixed-scaling pixel encoder needs no data: make it for ``height`` x ``width`` images."""
        if self.config["scaling"] != "fixed":
            raise ParameterError("only scaling=fixed can be made without fitting data")
        self.fit(np.zeros((1, height, width), np.float32), source="no data (fixed scaling)")
        return self

    def _encode(self, x):
        flat = x.reshape(len(x), -1)
        span = np.maximum(self.hi - self.lo, 1e-12)
        z = (flat - self.lo) / span
        return np.clip(np.floor(z * self.d), 0, self.d - 1).astype(value_dtype(self.d))

    def _state(self):
        return {"lo": self.lo, "hi": self.hi}

    def _load_state(self, state):
        self.lo, self.hi = state["lo"], state["hi"]


# --------------------------------------------------------------------------------------------- HOG-BoVW


class HogBovwEncoder(Encoder):
    """The paper's BoVW baseline: HOG block descriptors (scikit-image) of each image, a K-means visual
    vocabulary, and the per-image count of each visual word as the m = ``words`` features.

    The domain is ``d = 1 + the largest count seen in the fitting data`` (the paper sets d from the
    largest observed count); larger counts on new images are clipped to d − 1.
    """

    name = "hog-bovw"
    summary = "HOG descriptors, K-means vocabulary, word-count histogram (Wang & Chang 2020's BoVW baseline)"
    params = (
        Param("words", int, 50, "vocabulary size (number of K-means clusters) = features per image", minimum=2),
        Param("orientations", int, 9, "HOG orientation bins", minimum=1),
        Param("cell", int, 4, "HOG cell size in pixels", minimum=1),
        Param("block", int, 1, "HOG block size in cells (1: one descriptor per cell)", minimum=1),
        Param("max_descriptors", int, 200_000, "descriptors sampled to fit the vocabulary", minimum=100),
    )

    def _descriptors(self, x: np.ndarray) -> np.ndarray:
        from privpix.mechanisms.ldp.hog import hog_l2hys

        c = self.config
        need = c["cell"] * c["block"]  # one block of block x block cells of cell x cell pixels
        if x.shape[1] < need or x.shape[2] < need:
            raise ParameterError(
                f"encoder {self.name}: images of {x.shape[1]}x{x.shape[2]} are too small for one HOG block of "
                f"block={c['block']} cells of cell={c['cell']} pixels ({need}x{need}); use larger images or lower "
                "cell or block"
            )
        # At least one block per image (checked above; an empty set is refused before any encoder runs).
        return hog_l2hys(x, c["orientations"], c["cell"], c["block"]).astype(np.float32)  # (n, blocks, dims)

    def _fit(self, x, labels, *, seed, progress):
        from sklearn.cluster import MiniBatchKMeans

        desc = self._descriptors(x)
        flat = desc.reshape(-1, desc.shape[-1])
        rng = np.random.default_rng(seed)
        if len(flat) > self.config["max_descriptors"]:
            flat = flat[rng.choice(len(flat), self.config["max_descriptors"], replace=False)]
        if len(flat) < self.config["words"]:
            raise ParameterError(
                f"encoder {self.name}: a vocabulary of words={self.config['words']} needs at least as many HOG "
                f"descriptors, and the {len(x)} fitting image(s) give {len(flat)}; fit on more or larger images, or "
                "lower words"
            )
        km = MiniBatchKMeans(n_clusters=self.config["words"], random_state=seed, n_init=3, batch_size=4096)
        km.fit(flat)
        self.centers = km.cluster_centers_.astype(np.float32)
        counts = self._counts(desc)
        self.d = int(counts.max()) + 1
        if self.d < 2:
            self.d = 2

    def _counts(self, desc: np.ndarray) -> np.ndarray:
        n, b, k = desc.shape
        flat = desc.reshape(-1, k)
        d2 = (flat**2).sum(1, keepdims=True) - 2 * flat @ self.centers.T + (self.centers**2).sum(1)
        word = d2.argmin(1).reshape(n, b)
        w = self.centers.shape[0]
        idx = (np.arange(n)[:, None] * w + word).ravel()
        return np.bincount(idx, minlength=n * w).reshape(n, w)

    def _encode(self, x):
        counts = self._counts(self._descriptors(x))
        return np.minimum(counts, self.d - 1).astype(value_dtype(self.d))

    def _state(self):
        return {"centers": self.centers}

    def _load_state(self, state):
        self.centers = state["centers"]
