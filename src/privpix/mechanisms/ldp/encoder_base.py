"""The encoder base class, and the encoder registry derived from the mechanism registry.

Concrete encoders (:mod:`~privpix.mechanisms.ldp.encoders` for pixel and HOG-BoVW,
:mod:`~privpix.mechanisms.ldp.dcaconv`, :mod:`~privpix.mechanisms.ldp.bnn`) subclass :class:`Encoder` here. There
is no second registry: an encoder is reachable by name (:data:`ENCODERS`, ``make_encoder``, ``load_encoder``)
because a registered LDP feature mechanism (:mod:`~privpix.mechanisms.ldp.mechanism`, one per encoder) names it
as its ``encoder_class``. :data:`ENCODERS` is a read-only view of :data:`privpix.mechanisms.registry.MECHANISMS`, so
a name cannot be overwritten: registering a second mechanism under a taken name, or one whose encoder name is
taken by another class (:func:`~privpix.mechanisms.ldp.mechanism.register_ldp`), is refused.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privpix import strict_json
from privpix.data.imageset import ImageSet
from privpix.data.overlap import image_digests
from privpix.errors import ParameterError
from privpix.fileio import write_bytes_atomic
from privpix.mechanisms.base import Param
from privpix.mechanisms.registry import MECHANISMS
from privpix.privacy.grr import value_dtype

FORMAT = "privpix-ldp-encoder/1"


def gray_images(images: ImageSet | np.ndarray) -> ImageSet:
    """The images as an encoder sees them (grey, [0, 1]), for the overlap checks shared with every public set
    (:mod:`privpix.data.overlap`: SHA-256 of the 8-bit pixels)."""
    return ImageSet(np.clip(as_gray(images), 0.0, 1.0).astype(np.float32))


def as_gray(images: ImageSet | np.ndarray, name: str = "images") -> np.ndarray:
    """Images as float32 (n, h, w) in [0, 1]. Accepts an ImageSet, or an array (n, h, w) / (n, h, w, 1)
    that is uint8 (0–255) or float in [0, 1]."""
    if isinstance(images, ImageSet):
        x = images.grayscale().as_float()[..., 0]
    else:
        x = np.asarray(images)
        if x.ndim == 4 and x.shape[-1] == 1:
            x = x[..., 0]
        if x.ndim != 3:
            raise ParameterError(f"{name} must have shape (n, h, w) or (n, h, w, 1), got {x.shape}")
        if x.dtype == np.uint8:
            x = x.astype(np.float32) / 255.0
        else:
            x = x.astype(np.float32)
            if x.size and (not np.all(np.isfinite(x)) or x.min() < 0 or x.max() > 1):
                raise ParameterError(f"{name}: float images must be finite and in [0, 1]")
    if len(x) == 0:
        raise ParameterError(f"{name} is empty")
    return np.ascontiguousarray(x, dtype=np.float32)


class Encoder:
    """Base class. Subclasses set ``name``, ``summary``, ``params``, ``needs_labels`` and implement
    ``_fit`` (set ``self.d`` and learn state), ``_encode`` and ``_state`` / ``_load_state``.

    Attributes after fitting: ``d`` (domain size), ``image_shape`` (h, w the encoder expects),
    ``n_features`` (m), ``fitted_on`` (a description of the fitting data), ``fit_seconds``.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    needs_labels: ClassVar[bool] = False
    params: ClassVar[tuple[Param, ...]] = ()

    def __init__(self, **params: Any) -> None:
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ParameterError(
                f"encoder {self.name}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}"
            )
        self.config: dict[str, Any] = {k: p.validate(params.get(k, p.default)) for k, p in known.items()}
        self.d: int | None = None
        self.image_shape: tuple[int, int] | None = None
        self.n_features: int | None = None
        self.fitted_on: str = ""
        self.fit_seconds: float = 0.0
        # SHA-256 of each fitting image as the encoder saw it (8-bit grey): what tells whether reported images were
        # among them, without naming where they came from. Saved in the encoder file; empty for older files.
        self.fit_digests: frozenset[bytes] = frozenset()

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({cfg})"

    @property
    def fitted(self) -> bool:
        return self.d is not None

    # What fitting sets (None before): these read one where the encoder must be fitted, and refuse it unfitted.

    def fitted_d(self) -> int:
        """d, the domain size of every feature (set first by a fit, before it encodes)."""
        if self.d is None:
            raise ParameterError(f"encoder {self.name} is not fitted: call fit() or load a fitted encoder file")
        return self.d

    def fitted_m(self) -> int:
        """m, the number of features."""
        if self.n_features is None:
            raise ParameterError(f"encoder {self.name} is not fitted: call fit() or load a fitted encoder file")
        return self.n_features

    def fitted_hw(self) -> tuple[int, int]:
        """(h, w) of the images it encodes."""
        if self.image_shape is None:
            raise ParameterError(f"encoder {self.name} is not fitted: call fit() or load a fitted encoder file")
        return self.image_shape

    def at_size(self, images: ImageSet) -> ImageSet:
        """``images`` at the (h, w) the encoder encodes: resized when they differ (a resize that cannot fit in memory
        is refused before anything is allocated)."""
        from privpix.data.memory import check_resize_fits

        h, w = self.fitted_hw()
        if tuple(images.shape[:2]) == (h, w):
            return images
        check_resize_fits(len(images), (h, w), images.shape[2], "the encoder's image size")
        return images.resized(h, w)

    def fit(
        self,
        images: ImageSet | np.ndarray,
        labels: np.ndarray | None = None,
        *,
        source: str = "unnamed images",
        seed: int = 0,
        progress: bool = False,
    ) -> Encoder:
        """Learn the encoder from ``images`` (and ``labels`` for supervised encoders).

        ``source`` records which data was used: it is copied into every report's guarantee, since the
        fitted encoder is a function of that data and is not protected by the owners' perturbation.
        """
        x = as_gray(images)
        if labels is None and isinstance(images, ImageSet):
            labels = images.labels
        if self.needs_labels:
            if labels is None:
                raise ParameterError(f"encoder {self.name} is supervised: it needs labelled images to fit")
            labels = np.asarray(labels)
            if labels.shape != (len(x),):
                raise ParameterError(f"labels must have shape ({len(x)},), got {labels.shape}")
            if len(np.unique(labels)) < 2:
                raise ParameterError(f"encoder {self.name}: needs at least two classes to fit")
        t0 = time.perf_counter()
        self.image_shape = (int(x.shape[1]), int(x.shape[2]))
        self._fit(x, labels, seed=seed, progress=progress)
        self.fitted_on = f"{source} ({len(x)} images{', labelled' if self.needs_labels else ''})"
        self.fit_digests = image_digests(gray_images(x))
        self.fit_seconds = time.perf_counter() - t0
        self.n_features = int(self._encode(x[:1]).shape[1])
        return self

    def encode(self, images: ImageSet | np.ndarray, batch_size: int = 2000) -> np.ndarray:
        """Integer features (n, m) in ``[0, d)``, in the smallest unsigned dtype that holds them."""
        d, m, hw = self.fitted_d(), self.fitted_m(), self.fitted_hw()
        x = as_gray(images)
        if tuple(x.shape[1:]) != hw:
            raise ParameterError(
                f"images are {x.shape[1]}x{x.shape[2]} but encoder {self.name} was fitted on "
                f"{hw[0]}x{hw[1]}: resize them (e.g. --size) first"
            )
        out = np.empty((len(x), m), dtype=value_dtype(d))
        for i in range(0, len(x), batch_size):
            out[i : i + batch_size] = self._encode(x[i : i + batch_size])
        return out

    def fit_encode(self, images: ImageSet | np.ndarray, labels: np.ndarray | None = None, **kw: Any) -> np.ndarray:
        return self.fit(images, labels, **kw).encode(images)

    # ---------------------------------------------------------------- persistence

    @property
    def uses_fitting_data(self) -> bool:
        """Whether the fitted encoder depends on the images it was fitted on (and so can leak them)."""
        return True

    def first_layer_responses(self, images: ImageSet | np.ndarray) -> np.ndarray | None:
        """(n, features) responses of the encoder's first learnt layer, for attacks on what it was fitted on;
        ``None`` when the encoder has no learnt filters."""
        return None

    def describe(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "encoder": self.name,
            "config": self.config,
            "d": self.d,
            "image_shape": list(self.image_shape) if self.image_shape else None,
            "n_features": self.n_features,
            "fitted_on": self.fitted_on,
            "fit_seconds": round(self.fit_seconds, 3),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted encoder to one ``.npz`` file (atomically; no pickle)."""
        if not self.fitted:
            raise ParameterError(f"encoder {self.name} is not fitted; nothing to save")
        path = Path(path)
        buf = io.BytesIO()
        arrays = {f"state_{k}": v for k, v in self._state().items()}
        arrays["fit_digests"] = np.frombuffer(b"".join(sorted(self.fit_digests)), np.uint8).reshape(-1, 32)
        # numpy's stub types **kwds as if a key could be its allow_pickle flag; every value here is an array.
        meta = np.array(strict_json.dumps(self.describe(), default=None))
        np.savez_compressed(buf, meta=meta, **arrays)  # type: ignore[arg-type]
        write_bytes_atomic(path, buf.getvalue())
        return path

    def _state(self) -> dict[str, np.ndarray]:
        return {}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        pass

    def _fit(self, x: np.ndarray, labels: np.ndarray | None, *, seed: int, progress: bool) -> None:
        raise NotImplementedError

    def _encode(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class EncoderRegistry(Mapping):
    """Encoder name → :class:`Encoder` subclass, read-only, derived on every lookup from the registered
    mechanisms that declare an ``encoder_class`` (the LDP feature mechanisms). Two different encoder classes
    under one name are an error, never a silent overwrite."""

    def providers(self) -> dict[str, tuple[str, type[Encoder]]]:
        """Encoder name → (first registered mechanism name that wraps it, encoder class)."""
        # The built-in LDP mechanisms are registered by importing privpix.mechanisms, which importing this
        # module (inside that package) has already done.
        out: dict[str, tuple[str, type[Encoder]]] = {}
        for mname, cls in list(MECHANISMS.items()):
            enc = getattr(cls, "encoder_class", None)
            if not (isinstance(enc, type) and issubclass(enc, Encoder)):
                continue
            prev = out.get(enc.name)
            if prev is not None and prev[1] is not enc:
                raise ValueError(
                    f"encoder {enc.name!r} is defined twice: by mechanism {prev[0]!r} ({prev[1].__qualname__}) and "
                    f"by mechanism {mname!r} ({enc.__qualname__}); rename one"
                )
            out.setdefault(enc.name, (mname, enc))
        return out

    def __getitem__(self, name: str) -> type[Encoder]:
        return self.providers()[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self.providers())

    def __len__(self) -> int:
        return len(self.providers())

    def __repr__(self) -> str:
        return f"EncoderRegistry({', '.join(sorted(self))})"


ENCODERS = EncoderRegistry()
